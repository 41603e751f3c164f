"""A small CNN with BatchNorm in plain torch, trained through zeroshard:
ZeRO-2, FP32, 2 accumulated micro-batches (cnn_zero2.json), on images drawn
here (a square, a disc or a cross, placed and sized at random, in noise),
so nothing is downloaded. BatchNorm's running statistics stay on the ranks
and are saved with the checkpoint written at the end.

    bash scripts/run-torch-example.sh cnn [--steps=N] [--out=DIR]
"""

import os

import torch
from torch import nn

import example_loop

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE = 24


def shapes(n, seed):
    """n images (1 x SIZE x SIZE) and their labels: 0 square, 1 disc, 2 cross."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    images = torch.randn(n, 1, SIZE, SIZE, generator=g) * 0.3
    labels = torch.randint(0, 3, (n,), generator=g)
    for i in range(n):
        r = int(torch.randint(3, 7, (1,), generator=g))
        cy, cx = (int(v) for v in torch.randint(r, SIZE - r, (2,), generator=g))
        dy, dx = (yy - cy).abs(), (xx - cx).abs()
        mask = [(dy <= r) & (dx <= r),
                (dy * dy + dx * dx) <= r * r,
                ((dy <= 1) & (dx <= r)) | ((dx <= 1) & (dy <= r))][int(labels[i])]
        images[i, 0][mask] += 1.0
    return images, labels


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (SIZE // 4) ** 2, 64), nn.ReLU(),
        nn.Linear(64, 3))


def main():
    args, cfg = example_loop.parse_flags(
        __doc__.splitlines()[0], os.path.join(HERE, "cnn_zero2.json"),
        "out/torch-cnn", 150)
    torch.manual_seed(cfg["zeroshard"].get("seed", 42))
    train_set = torch.utils.data.TensorDataset(*shapes(4096, seed=1))
    val_x, val_y = shapes(256, seed=2)
    loss_fn = nn.CrossEntropyLoss()
    model = cnn()

    def evaluate(engine):
        model.eval()
        with torch.no_grad():
            loss = loss_fn(engine(val_x), val_y).item()
        model.train()
        return loss

    engine = example_loop.train(args, cfg, model, train_set, loss_fn, 1,
                                evaluate, "torch CNN (ZeRO-2, FP32)")
    del engine


if __name__ == "__main__":
    main()
