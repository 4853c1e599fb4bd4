#pragma once
// SHA-256 is how Gleaner names content: shards, weights and model specs are fetched as
// /api/v1/files/{sha256}, cached under their hash and checked against the signed manifest before a worker
// sees them. This class hashes through OpenSSL's EVP API; hashFile() streams, so a dataset larger than memory
// hashes in constant space.

#include "Result.h"

#include <QByteArray>
#include <QByteArrayView>
#include <QString>
#include <QStringView>

#include <memory>

class QIODevice;
struct evp_md_ctx_st; // OpenSSL's EVP_MD_CTX; declared here so this header does not pull in OpenSSL.

namespace gleaner {

class Sha256
{
public:
    static constexpr qsizetype kDigestSize = 32;
    static constexpr qsizetype kHexSize = 64;
    // hashFile() / hashDevice() read this much at a time: large enough to keep syscalls cheap, small enough
    // that hashing a 50 GB shard uses 1 MiB of memory.
    static constexpr qsizetype kChunkSize = 1024 * 1024;

    Sha256();
    ~Sha256();
    // Movable so a hasher can live in a download job; not copyable, because two owners feeding one context
    // would silently corrupt the digest.
    Sha256(Sha256&& other) noexcept;
    Sha256& operator=(Sha256&& other) noexcept;
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;

    void addData(QByteArrayView data);
    // The 32-byte digest of everything added so far. It does not end the hash: more data may follow, and
    // result() may be called again. Empty when the hasher is not valid, which never equals a real digest,
    // so a comparison against an expected hash fails closed.
    QByteArray result() const;
    // Starts over with no data; also revives a moved-from hasher.
    void reset();
    // False after a move or when OpenSSL could not set up or update SHA-256 (a broken OpenSSL configuration).
    bool isValid() const { return m_context != nullptr; }
    // Why the hasher is not valid (OpenSSL's words); empty while it is.
    const QString& errorString() const { return m_error; }

    static QByteArray hash(QByteArrayView data);
    // Streams the file in kChunkSize pieces; errors name the path.
    static Result<QByteArray> hashFile(const QString& path);
    // Reads `device` (open for reading) from its current position until read() returns no more data.
    // A sequential device (socket, process) gives only what it holds without waiting.
    static Result<QByteArray> hashDevice(QIODevice* device);

    // Lowercase hex, the one spelling Gleaner uses in URLs, manifests and cache file names.
    static QString toHex(QByteArrayView digest);
    // True only for exactly 64 characters of [0-9a-f]. Hashes from the network become file names and URL
    // paths, so anything else (uppercase, which would give a second name for one file, separators, "..",
    // non-ASCII digits) is refused.
    static bool isHexDigest(QStringView text);

private:
    struct ContextDeleter
    {
        void operator()(evp_md_ctx_st* context) const;
    };
    void failWith(const char* step);

    std::unique_ptr<evp_md_ctx_st, ContextDeleter> m_context;
    QString m_error;
};

} // namespace gleaner
