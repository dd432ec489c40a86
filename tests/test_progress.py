"""A notebook's saved progress bar shows where it ended (what GitHub shows), not 0 %."""
import json

import nbformat
from nbclient import NotebookClient


def test_a_saved_notebook_shows_the_finished_bar(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "from helpers.show.progress import tqdm\n"
        "bar = tqdm(total=40, desc='steps')\n"
        "for _ in range(40):\n    bar.update()\n"
        "bar.close()")]
    path = tmp_path / "bar.ipynb"
    # Executed by a real kernel and saved as nbconvert --execute saves it (nbclient: the
    # executor nbconvert's ExecutePreprocessor is), without a jupyter-nbconvert process.
    NotebookClient(nb, kernel_name="python3", timeout=300,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(nb, path)
    outputs = json.loads(path.read_text())["cells"][0]["outputs"]
    texts = [o["data"]["text/plain"] for o in outputs if "text/plain" in o.get("data", {})]
    assert len(texts) == 1, outputs  # one bar, updated in place: no second copy
    text = "".join(texts[0])
    assert "100%" in text and "40/40" in text, text
    assert "application/vnd.jupyter.widget-view+json" in outputs[0]["data"]
