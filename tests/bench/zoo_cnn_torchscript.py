#!/usr/bin/env python3
"""Writes the zoo's cnn (channels [32, 64], hidden [128], input [1, 28, 28], 10 classes: the default job's model)
as a TorchScript archive with the zoo's own tensor names, so bench_torchscript trains the two from the same
weights and compares their speed:

    /usr/bin/python3 tests/bench/zoo_cnn_torchscript.py OUT.pt
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(64 * 7 * 7, 128)
        self.classifier = nn.Linear(128, 10)

    def forward(self, x):
        return self.classifier(F.relu(self.fc0(x.flatten(1))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.head = Head()

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x)


torch.jit.save(torch.jit.script(Cnn()), sys.argv[1])
