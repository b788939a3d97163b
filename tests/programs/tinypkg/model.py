from torch import nn


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1))

    def forward(self, x):
        return self.layers(x)
