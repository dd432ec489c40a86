"""The MLP every stage trains: the model of the AWS Neuron MLP tutorial, defined once."""
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """784 -> 120 -> 84 -> 10: three Linear layers with ReLU between, log_softmax out."""

    def __init__(self, input_size=784, output_size=10, layers=(120, 84)):
        super().__init__()
        self.fc1 = nn.Linear(input_size, layers[0])
        self.fc2 = nn.Linear(layers[0], layers[1])
        self.fc3 = nn.Linear(layers[1], output_size)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        # log_softmax + NLLLoss is cross-entropy, as in the tutorial.
        return F.log_softmax(x, dim=1)
