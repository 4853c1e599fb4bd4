#!/usr/bin/env python3
"""Writes the TorchScript fixtures of tests/ml/TestScriptModel.cpp with Debian 12's python3-torch (1.13.1):

    cd tests/ml/data/torchscript && /usr/bin/python3 make_fixtures.py

batchnorm-pytorch2.pt is batchnorm.pt as PyTorch 2.11 (CUDA 13 build) wrote it from this same script: an admin's
PyTorch is usually newer than Debian's libtorch, and its archives must load too.

Every model takes samples of shape [1, 8, 8] and gives 3 logits. The hostile ones are what a coordinator that was
broken into could send: each must be refused before it runs.
"""
import pickle
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(7)


class Residual(nn.Module):
    """Layers the zoo does not have: LayerNorm, GELU, dropout, a residual block."""

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
        self.inp = nn.Linear(64, 16)
        self.block = Residual(16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        return self.out(self.block(self.inp(x.flatten(1))))


class Sequence(nn.Module):
    """Rows of the image as a sequence of 8 steps."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 12, batch_first=True)
        self.out = nn.Linear(12, 3)

    def forward(self, x):
        steps, _ = self.gru(x.reshape(x.size(0), 8, 8))
        return self.out(steps[:, -1])


class Normed(nn.Module):
    """BatchNorm: running statistics and an integer counter among the buffers."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(F.max_pool2d(F.relu(self.bn(self.conv(x))), 2).flatten(1))


class ReadsFile(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        leaked = torch.from_file("/etc/passwd", False, 64)
        return self.fc(x.flatten(1) + leaked.float().sum() * 0)


class Helper(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x * self.scale

    @torch.jit.export
    def peek(self, x):
        return x + torch.from_file("/etc/shadow", False, 64).float().sum()


class HiddenInSubmodule(nn.Module):
    """The file-reading operator sits in a submodule's method that forward() reaches only on a condition that a
    zero batch never meets."""

    def __init__(self):
        super().__init__()
        self.helper = Helper()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        flat = x.flatten(1)
        if bool(flat.sum() > 1e30):
            flat = self.helper.peek(flat)
        return self.fc(self.helper(flat))


class Prints(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        print("hello from the model")
        return self.fc(x.flatten(1))


class WrongOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 7)

    def forward(self, x):
        return self.fc(x.flatten(1))


class Double(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3).double()

    def forward(self, x):
        return self.fc(x.flatten(1).double()).float()


class SetsState(nn.Module):
    """__setstate__ runs while the archive loads, before any check of the program could."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(3, 64))

    def forward(self, x):
        return F.linear(x.flatten(1), self.weight)

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, bool]:
        return (self.weight, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]):
        self.weight = state[0] + torch.from_file("/etc/passwd", False, 1).float().sum() * 0
        self.training = state[1]


class Tokens(nn.Module):
    """nn.TransformerEncoder over the image's 8 rows as tokens: attention, its fused inference path included."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        return self.out(self.encoder(self.embed(x.reshape(x.size(0), 8, 8))).mean(1))


# Memory access and memory use (docs/your-model.md, the operator audit): each of these passes the operator walk
# as it was before the audit, and each is refused at load.
class ReshapeAlias(nn.Module):
    """Its one unusual call points a view 4 TiB past a 4-element storage."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        far = torch.ops.aten._reshape_alias(torch.zeros(4), [2], [1 << 40])
        return self.fc(x.flatten(1)) + far.sum() * 0


class AsStrided(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        far = torch.as_strided(x, [2], [1 << 40])
        return self.fc(x.flatten(1)) + far.sum() * 0


class CircularPad(nn.Module):
    """Negative circular padding: libtorch reads before the input."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc(F.pad(x.flatten(2), [-70, 6], mode="circular").flatten(1))


class UsesTorchBind(nn.Module):
    """A TorchBind class (compiled C++ of libtorch's) reached through an attribute and a method call; the pickle
    holds None, so nothing but the program's types shows it, and a zero batch never takes that branch."""

    packed: Optional[torch.classes.quantized.LinearPackedParamsBase]

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3)
        self.packed = None

    def forward(self, x):
        packed = self.packed
        if packed is not None:
            return self.fc(x.flatten(1)) * float(packed.unpack()[0].size(0))
        return self.fc(x.flatten(1))


class HugeAllocation(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc(x.flatten(1)) + torch.zeros([1 << 40])[0]


class HugeRepeat(nn.Module):
    """128 GiB from a batch of two, tiled."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc(x.flatten(1)) + x.repeat(1 << 14, 1 << 14, 1, 1).sum() * 0


class StackedLstm(nn.Module):
    """nn.LSTM with every variant of its flat weights: two layers, both directions, projections."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 12, num_layers=2, bidirectional=True, proj_size=6, batch_first=True)
        self.out = nn.Linear(12, 3)

    def forward(self, x):
        steps, _ = self.lstm(x.reshape(x.size(0), 8, 8))
        return self.out(steps[:, -1])


class ShortGateWeights(nn.Module):
    """nn.GRU's operator called with 1-row gate weights: libtorch splits the gates into 3 chunks and reads all 3."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, x):
        rows = x.reshape(x.size(0), 8, 8)
        weights = [torch.zeros(1, 8), torch.zeros(1, 5), torch.zeros(1), torch.zeros(1)]
        steps, _ = torch._VF.gru(rows, torch.zeros(1, x.size(0), 5), weights, True, 1, 0.0, False, False, True)
        return self.fc(steps[:, -1])


class CastHolder(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = 1


class CastTarget(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = 1
        self.e = torch.zeros(3)
        self.f = torch.zeros(3)
        self.g = torch.zeros(3)


class UncheckedCast(nn.Module):
    """Saved reading self.target.g; rewrite_code() below makes it read g from self.holder cast to CastTarget with
    prim::unchecked_cast, which libtorch does not check: the attribute index runs past the holder's one slot."""

    def __init__(self):
        super().__init__()
        self.holder = CastHolder()
        self.target = CastTarget()
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        return self.fc(x.flatten(1)) + self.target.g


def rewrite_code(name, old, new):
    """Rewrites the program's source inside a saved archive, as someone who edits code/ by hand would."""
    import zipfile
    with zipfile.ZipFile(name) as archive:
        members = [(info, archive.read(info.filename)) for info in archive.infolist()]
    with zipfile.ZipFile(name, "w", zipfile.ZIP_STORED) as archive:
        for info, data in members:
            if info.filename.endswith("/code/__torch__.py"):
                assert old in data
                data = data.replace(old, new)
            archive.writestr(info, data)


def save(model, name):
    torch.jit.save(torch.jit.script(model), name)


save(ResidualMlp(), "residual.pt")
save(Sequence(), "sequence.pt")
save(Normed(), "batchnorm.pt")
save(ReadsFile(), "reads-file.pt")
save(HiddenInSubmodule(), "hidden-in-submodule.pt")
save(Prints(), "prints.pt")
save(WrongOutput(), "wrong-output.pt")
save(Double(), "double.pt")
save(SetsState(), "sets-state.pt")
torch.save(ResidualMlp().state_dict(), "state-dict.pt")
with open("pickle.pt", "wb") as out:
    pickle.dump({"weights": [1.0, 2.0]}, out)
save(Tokens(), "transformer.pt")
# The weights PyTorch's residual.pt holds, as the tests compare them with Gleaner's reading.
reference = torch.jit.load("residual.pt")
with open("residual-names.txt", "w") as out:
    for name, tensor in reference.state_dict().items():
        out.write("%s %s\n" % (name, "x".join(str(d) for d in tensor.shape) or "scalar"))


# Archives altered after torch.jit.save, as an attacker would: each passes the ZIP reader and must be refused by the
# archive check before libtorch sees it.
import pickletools
import zipfile


def altered(source, target, change):
    """Writes `target` from archive `source`, each member passed through change(name, data) -> [(name, data)]."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for info in zin.infolist():
            for name, data in change(info.filename, zin.read(info)):
                zout.writestr(zipfile.ZipInfo(name, info.date_time), data, compress_type=info.compress_type)


def truncated_record(name, data):
    """data/0 sixteen bytes shorter than data.pkl declares: libtorch would make a tensor larger than its storage."""
    return [(name, data[:-16] if name == "residual/data/0" else data)]


altered("residual.pt", "truncated-record.pt", truncated_record)


def shrunk_storage(name, data):
    """The first storage declared one element smaller, its record shortened to match: the tensor over it now
    reaches past its end."""
    if name == "residual/data.pkl":
        ops = list(pickletools.genops(data))
        persid = next(i for i, (op, _, _) in enumerate(ops) if op.name == "BINPERSID")
        op, numel, at = ops[persid - 2]  # ..., elements, TUPLE, BINPERSID
        assert op.name in ("BININT1", "BININT2", "BININT") and numel > 1, op.name
        width = {"BININT1": 1, "BININT2": 2, "BININT": 4}[op.name]
        data = data[:at + 1] + (numel - 1).to_bytes(width, "little") + data[at + 1 + width:]
        return [(name, data)]
    if name == "residual/data/0":
        return [(name, data[:-4])]
    return [(name, data)]


altered("residual.pt", "storage-too-small.pt", shrunk_storage)


def torchbind_global(name, data):
    """The model object declared as a TorchBind class, whose C++ state setter libtorch would call while loading."""
    if name == "residual/data.pkl":
        data = data.replace(b"c__torch__\nResidualMlp\n", b"c__torch__.torch.classes.gleaner\nResidualMlp\n", 1)
    return [(name, data)]


altered("residual.pt", "torchbind-object.pt", torchbind_global)


def upper_case_code(name, data):
    """The program's source under CODE/, which libtorch finds as code/ (it ignores case), beside a harmless code/
    member so that the archive still seems to hold a program."""
    if name == "sets-state/code/__torch__.py":
        return [("sets-state/CODE/__torch__.py", data), ("sets-state/code/__torch__/harmless.py", b"")]
    return [(name, data)]


altered("sets-state.pt", "code-upper-case.pt", upper_case_code)


def case_twins(name, data):
    """Two members libtorch cannot tell apart: which one it reads is not the one a check may have read."""
    if name == "residual/code/__torch__.py":
        return [(name, data), ("residual/Code/__torch__.py", data)]
    return [(name, data)]


altered("residual.pt", "case-twins.pt", case_twins)
save(ReshapeAlias(), "reshape-alias.pt")
save(AsStrided(), "as-strided.pt")
save(CircularPad(), "circular-pad.pt")
save(UsesTorchBind(), "torchbind.pt")
save(HugeAllocation(), "huge-allocation.pt")
save(HugeRepeat(), "huge-repeat.pt")
save(StackedLstm(), "lstm.pt")
save(ShortGateWeights(), "gru-short-weights.pt")
save(UncheckedCast(), "unchecked-cast.pt")
rewrite_code("unchecked-cast.pt", b"target = self.target\n", b"target = unchecked_cast(__torch__.CastTarget, self.holder)\n")
