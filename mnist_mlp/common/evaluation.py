"""Test accuracy over every image a loader yields."""
from __future__ import annotations

import torch


@torch.no_grad()
def evaluate(model, loader, device) -> tuple[int, int]:
    """(correct, total) over every image the loader yields; counts stay on the device."""
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    total = 0
    for images, labels in loader:
        images = images.view(images.size(0), -1).to(device)
        labels = labels.to(device)
        correct += (model(images).argmax(dim=1) == labels).sum()
        total += labels.size(0)
    model.train()
    return int(correct.cpu()), total


def report_accuracy(correct: int, total: int) -> float:
    accuracy = correct / total
    print(f"Test accuracy: {accuracy:.4f} ({correct}/{total} correct)")
    return accuracy
