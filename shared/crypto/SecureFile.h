#pragma once
// Reading and writing the files that hold Gleaner's secrets (the manifest signing key, the TLS private key)
// and the public files written beside them (the TLS certificate). One implementation, so every key file gets
// the same guarantees: written atomically with its final mode set before the first byte, never through a
// symbolic link, and read only after its permissions and size were checked on the open descriptor.

#include "Result.h"

#include <QByteArray>
#include <QByteArrayView>
#include <QString>

namespace gleaner {

class SecureFile
{
public:
    // Writes `bytes` to `path` with exactly `mode` (0600 for a key, 0644 for a certificate; the umask is
    // ignored), atomically: a temporary file in the same folder is created, given `mode` before any byte is
    // written, filled, flushed to disk and renamed over `path`, so a crash never leaves a half-written file
    // and a secret is never readable by others for a moment. Refuses when `path` is a symbolic link rather
    // than replacing or following it. `what` names the file in messages ("private key", "certificate").
    static Status write(const QString& path, QByteArrayView bytes, int mode, const QString& what);

    // Reads a regular file of at most `maxSize` bytes. When any of `forbiddenModeBits` is set in its mode
    // (for example 077: any group or world permission) the file is refused, as ssh refuses its keys, with a
    // message that names the path, says `exposure` (what a reader of the file could do) and gives the
    // `chmod 600` that fixes it. The caller owns the bytes and should wipe them when they are a secret.
    static Result<QByteArray> read(const QString& path, const QString& what, qsizetype maxSize,
                                   int forbiddenModeBits = 0, const QString& exposure = {});

    // OPENSSL_cleanse, which the compiler may not optimise away, then clear().
    static void wipe(QByteArray& bytes);
};

} // namespace gleaner
