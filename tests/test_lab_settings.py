"""`make lab` installs the learner's JupyterLab defaults (helpers/setup/jupyterlab_overrides.json)
into the venv's app settings, where JupyterLab reads overrides: read back through
jupyterlab_server's own settings loader with this venv's schemas, the news setting is off, so a
newcomer meets no "Would you like to get notified about official Jupyter news?" pop-up (JupyterLab
asks only while `fetchNews` is "none"); a setting the learner saves still wins."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO_ROOT

NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def notification_settings(app_settings_dir: Path, user_settings_dir: Path) -> dict:
    from jupyterlab_server.settings_utils import _get_overrides, get_settings

    schemas = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"
    overrides, error = _get_overrides(str(app_settings_dir))
    assert not error
    found, _ = get_settings(str(app_settings_dir), str(schemas), str(user_settings_dir),
                            schema_name=NOTIFICATION, overrides=overrides)
    # What the page computes as each setting's "composite": the user's value, else the default
    # (which the overrides replace in the schema the server sends).
    defaults = {k: v.get("default") for k, v in found["schema"]["properties"].items()}
    return {**defaults, **found["settings"]}


def test_make_lab_turns_jupyter_news_off_for_the_learner(tmp_path):
    venv = tmp_path / "venv"
    target = venv / "share/jupyter/lab/settings/overrides.d/workbook.json"
    subprocess.run(["make", "-s", f"VENV={venv}", str(target)], cwd=REPO_ROOT, check=True)
    app_settings, user_settings = target.parent.parent, tmp_path / "user"
    settings = notification_settings(app_settings, user_settings)
    assert settings["fetchNews"] == "false" and settings["checkForUpdates"] is False
    # The learner's own choice, saved in their user settings, still wins.
    saved = user_settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps({"fetchNews": "true"}))
    assert notification_settings(app_settings, user_settings)["fetchNews"] == "true"
