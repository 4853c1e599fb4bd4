#pragma once
// A weights patch: what turns one published weights file into a later one, for an agent that still holds the
// earlier file (docs/protocol.md, section 8.5). It works on the files' bytes, not on tensors: the later
// file's header, then every 4-byte word of the data that differs, with how it differs (the XOR of the two
// words: a small change to a float leaves its sign, exponent and high bits, which zstd then packs away), and
// the bytes past the last whole word. Applying it gives the later file byte for byte, so the agent checks the
// result against the SHA-256 the signed manifest names for the weights, and nothing it trains from can drift
// from the server's file.
//
// The patch is itself a safetensors file, compressed with zstd:
//   header  U8 [H]     the later file's first H bytes (its length prefix, JSON header and padding)
//   index   I32 [m]    the changed words of the data as gaps (the first word's index, then each one's
//   distance
//                      from the one before, >= 1)
//   words   U32 [m]    their changes: earlier word XOR later word
//   tail    U8 [t]     the data's last (length mod 4) bytes
// with metadata gleaner.patch_from and gleaner.patch_to (the two files' SHA-256). Patches pay when a
// publication changes few values (a job's "download" density below 1): at density 1 every word changes and
// the agent takes the full file instead.

#include "Result.h"

#include <QByteArray>
#include <QString>

namespace gleaner::WeightsPatch {

// The patch from file `from` to file `to`, or an error when their data parts differ in length (not the same
// model's weights) or either is not a safetensors file.
Result<QByteArray> make(QByteArrayView from, QByteArrayView to, const QString& fromSha, const QString& toSha);

// The later file, from the earlier one and a patch. Refuses, saying what is wrong, a patch that is damaged,
// made from another file (`fromSha`), or whose result would exceed `maxBytes`; the caller still checks the
// result's SHA-256 against the one it expects.
Result<QByteArray> apply(QByteArrayView from, const QByteArray& patch, const QString& fromSha,
                         qint64 maxBytes);

} // namespace gleaner::WeightsPatch
