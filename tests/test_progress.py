"""A notebook's saved progress bar shows where it ended (what GitHub shows), not 0 %."""
import json
import subprocess
import sys

import nbformat


def test_a_saved_notebook_shows_the_finished_bar(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "from helpers.progress import tqdm\n"
        "bar = tqdm(total=40, desc='steps')\n"
        "for _ in range(40):\n    bar.update()\n"
        "bar.close()")]
    path = tmp_path / "bar.ipynb"
    nbformat.write(nb, path)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                    "--inplace", "--ExecutePreprocessor.kernel_name=python3", str(path)],
                   check=True, capture_output=True, timeout=300)
    outputs = json.loads(path.read_text())["cells"][0]["outputs"]
    texts = [o["data"]["text/plain"] for o in outputs if "text/plain" in o.get("data", {})]
    assert len(texts) == 1, outputs  # one bar, updated in place: no second copy
    text = "".join(texts[0])
    assert "100%" in text and "40/40" in text, text
    assert "application/vnd.jupyter.widget-view+json" in outputs[0]["data"]
