#!/usr/bin/env python3
"""PyTorch's side of tests/e2e/TestYourModel.cpp: scripts the models an admin would bring, trains the same model
in one PyTorch process as the reference, and evaluates what Gleaner exported, in PyTorch itself.

    your_model.py make KIND OUT.pt           KIND: residual (LayerNorm, GELU, dropout, a residual block) or
                                             sequence (a GRU over the image's rows)
    your_model.py train MODEL.pt DATA_DIR --limit N --epochs E --batch B --lr LR --seed S
    your_model.py evaluate MODEL.pt DATA_DIR --weights EXPORTED.safetensors
    your_model.py evaluate MODEL.pt DATA_DIR       (MODEL.pt: an archive Gleaner exported, weights inside)

DATA_DIR holds Fashion-MNIST's IDX files (Debian's dataset-fashion-mnist). Each command prints one JSON line.
Debian 12's python3-torch and python3-numpy; the safetensors file is read here with numpy alone.
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Residual(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(F.gelu(self.fc(self.norm(x))))


class ResidualMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(784, 128)
        self.block = Residual(128)
        self.out = nn.Linear(128, 10)

    def forward(self, x):
        return self.out(self.block(F.gelu(self.inp(x.flatten(1)))))


class RowSequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(28, 64, batch_first=True)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        steps, _ = self.gru(x.reshape(x.size(0), 28, 28))
        return self.out(steps[:, -1])


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split, limit=None):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy(x.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    return x, torch.from_numpy(y.astype(np.int64))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    types = {"F32": np.float32, "I64": np.int64, "F16": np.float16, "F64": np.float64, "BF16": None}
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[base + begin:base + end], dtype=types[info["dtype"]]).reshape(info["shape"])
        tensors[name] = torch.from_numpy(array.copy())
    return tensors


def accuracy(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for begin in range(0, len(x), 256):
            correct += int((model(x[begin:begin + 256]).argmax(1) == y[begin:begin + 256]).sum())
    return correct / len(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make")
    make.add_argument("kind", choices=["residual", "sequence"])
    make.add_argument("out")
    train = sub.add_parser("train")
    evaluate = sub.add_parser("evaluate")
    for p in (train, evaluate):
        p.add_argument("model")
        p.add_argument("data_dir")
    train.add_argument("--limit", type=int, default=None)
    train.add_argument("--epochs", type=int, default=1)
    train.add_argument("--batch", type=int, default=32)
    train.add_argument("--lr", type=float, default=0.001)
    train.add_argument("--seed", type=int, default=1)
    evaluate.add_argument("--weights")
    args = parser.parse_args()
    torch.set_num_threads(1)

    if args.command == "make":
        torch.manual_seed(1)
        model = ResidualMlp() if args.kind == "residual" else RowSequence()
        torch.jit.save(torch.jit.script(model), args.out)
        print(json.dumps({"file": args.out, "parameters": sum(p.numel() for p in model.parameters())}))
        return 0

    test_x, test_y = load(args.data_dir, "test")
    model = torch.jit.load(args.model)
    if args.command == "evaluate":
        if args.weights:
            tensors = read_safetensors(args.weights)
            model.load_state_dict(tensors)  # refuses missing or unexpected names
        print(json.dumps({"accuracy": accuracy(model, test_x, test_y)}))
        return 0

    # One process, one Adam, shuffled mini-batches: the reference Gleaner's one agent is compared with.
    torch.manual_seed(args.seed)
    x, y = load(args.data_dir, "train", args.limit)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    epochs = []
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x))
        for begin in range(0, len(x), args.batch):
            index = order[begin:begin + args.batch]
            optimizer.zero_grad()
            F.cross_entropy(model(x[index]), y[index]).backward()
            optimizer.step()
        epochs.append(accuracy(model, test_x, test_y))
        print("epoch %d: %.4f" % (epoch + 1, epochs[-1]), file=sys.stderr)
    print(json.dumps({"accuracy": epochs[-1], "epochs": epochs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
