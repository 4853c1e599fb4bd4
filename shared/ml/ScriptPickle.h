#pragma once
// Reads the pickles of a TorchScript archive (data.pkl, constants.pkl) the way libtorch's unpickler will, without
// building anything, to learn what libtorch would trust from them: every storage the pickle names by persistent id
// (its record, element type and count) and every view of a storage it rebuilds (offset, sizes, strides). libtorch
// makes a storage as large as the pickle says whatever its record holds, and sets a view's offset, sizes and
// strides without comparing them with the storage; so both are checked here, before libtorch sees the archive.
//
// Only what torch.jit.save writes is accepted: pickle protocol 2; plain dense tensors (_rebuild_tensor_v2) of the
// element types Gleaner reads; the TorchScript classes of the archive's own program; the list and type tags of
// torch.jit._pickle. Refused by name: quantized, sparse and subclassed tensors, TorchBind objects
// (__torch__.torch.classes.*: C++ classes whose state setter would run during the load), any other global, memo
// ids out of sequence (libtorch would grow its memo table to the id given) and malformed containers (a dict with
// an odd number of items is read past its end by libtorch). Torch-free.

#include "Result.h"

#include <QByteArrayView>
#include <QList>
#include <QString>

namespace gleaner::ml::ScriptPickle {

// The most a pickle may weigh: the pickles of a large model are a few MiB (names and structure, not the tensors).
inline constexpr qint64 kMaxBytes = qint64(64) << 20;

// One persistent id: a storage of `elements` items of `itemBytes` bytes each, read from the record `key` of the
// pickle's tensor folder (data/ for data.pkl, constants/ for constants.pkl).
struct Storage
{
    QString key;
    qint64 elements = 0;
    int itemBytes = 0;
    qint64 bytes() const { return elements * itemBytes; }
};

// The storages `pickle` names, in order (one entry per persistent id, so a storage shared by several tensors may
// appear more than once); every view it rebuilds already checked to lie inside its storage. `what` starts every
// message ("model.pt: data.pkl").
Result<QList<Storage>> storages(QByteArrayView pickle, const QString& what);

} // namespace gleaner::ml::ScriptPickle
