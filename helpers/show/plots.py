"""Pictures for the notebooks: digit grids and loss curves."""
from __future__ import annotations


def _to_numpy(values):
    if hasattr(values, "detach"):  # a torch tensor, possibly on an XLA device
        values = values.detach().cpu().numpy()
    import numpy as np

    return np.asarray(values)


def show_digits(images, labels, predictions=None, *, columns: int = 8):
    """A grid of digits titled with their label, or "label→prediction" (red when wrong).

    images: [N, 28, 28] or [N, 1, 28, 28] (tensor or array); labels, predictions: N ints.
    """
    import matplotlib.pyplot as plt

    pics = _to_numpy(images)
    if pics.ndim == 4 and pics.shape[1] == 1:
        pics = pics[:, 0]
    if pics.ndim != 3:
        raise ValueError(f"images must be [N, 28, 28] or [N, 1, 28, 28], got shape {pics.shape}")
    labels = _to_numpy(labels).reshape(-1)
    preds = None if predictions is None else _to_numpy(predictions).reshape(-1)
    if len(labels) != len(pics) or (preds is not None and len(preds) != len(pics)):
        raise ValueError(f"{len(pics)} images but {len(labels)} labels"
                         + ("" if preds is None else f" and {len(preds)} predictions"))
    if len(pics) == 0:
        raise ValueError("no images to show")
    columns = max(1, min(columns, len(pics)))
    rows = -(-len(pics) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.3 * columns, 1.5 * rows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k >= len(pics):
            continue
        ax.imshow(pics[k], cmap="gray_r")
        if preds is None:
            ax.set_title(str(int(labels[k])), fontsize=10)
        else:
            wrong = int(preds[k]) != int(labels[k])
            ax.set_title(f"{int(labels[k])}→{int(preds[k])}", fontsize=10,
                         color="#c00000" if wrong else "black")
    fig.tight_layout()
    return fig


def _as_series(history) -> tuple[list[float], list[float]]:
    points = list(history)
    if not points:
        raise ValueError("empty loss history: train at least one step first")
    if isinstance(points[0], (list, tuple)):
        steps, losses = zip(*((float(p[0]), float(p[1])) for p in points))
        return list(steps), list(losses)
    return [float(i) for i in range(len(points))], [float(v) for v in points]


def running_mean(values: list[float], window: int) -> list[float]:
    """The mean of `window` reads centred on each read; at the edges, of the reads there are. It
    spans every step, so the smoothed line starts and ends with the series (a trailing mean
    would start `window` reads late and lag a falling loss)."""
    left, right = (window - 1) // 2, window // 2
    spans = (values[max(0, i - left):i + right + 1] for i in range(len(values)))
    return [sum(span) / len(span) for span in spans]


def plot_loss_curve(history, *, title: str = "Training loss", smooth: int = 0):
    """Loss against step. history: [[step, loss], ...] or [loss, ...], or a dict of such
    series by name (e.g. loss_history_by_rank) drawn on one axis. smooth > 1 adds a centred
    running mean over that many reads (running_mean), which makes the trend readable over noisy
    batches; the reads themselves stay, faint, with one legend entry for them all."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    series = history if isinstance(history, dict) else {"loss": history}
    fig, ax = plt.subplots(figsize=(7, 3.5))
    smoothed = False
    for name, values in series.items():
        steps, losses = _as_series(values)
        label = None if len(series) == 1 else str(name)
        line, = ax.plot(steps, losses, alpha=0.35 if smooth > 1 else 1.0,
                        label=None if smooth > 1 else label)
        if smooth > 1 and len(losses) >= smooth:
            smoothed = True
            ax.plot(steps, running_mean(losses, smooth), color=line.get_color(),
                    label=f"{label or 'loss'} (mean of {smooth})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    if len(series) > 1 or smooth > 1:
        handles, labels = ax.get_legend_handles_labels()
        if smoothed:  # the faint lines: one entry says what they are
            handles.append(Line2D([], [], color="grey", alpha=0.35))
            labels.append("faint: each read (one batch)")
        ax.legend(handles, labels)
    fig.tight_layout()
    return fig
