#pragma once
// The fixed coordinator key and agent identity of the manifest fuzz targets. The key is RFC 8032's first
// test vector, so the seeds in corpus/envelope/ (signed by make-corpus.py with the same key) verify.

#include "crypto/Ed25519.h"
#include "runner/TaskManifest.h"

#include <cstdlib>

namespace gleaner::fuzz {

inline const SigningKey& coordinatorKey()
{
    static const SigningKey key = [] {
        auto made = SigningKey::fromRawSeed(
            QByteArray::fromHex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"));
        if (!made)
            std::abort();
        return std::move(*made);
    }();
    return key;
}

inline agent::ManifestExpectation expectation()
{
    static const LeaseId lease = [] {
        auto parsed = LeaseId::parse(u"fedcba9876543210fedcba9876543210");
        if (!parsed)
            std::abort();
        return *parsed;
    }();
    return {QStringLiteral("0123456789abcdef0123456789abcdef"), lease, QStringLiteral("https://localhost:8443")};
}

} // namespace gleaner::fuzz
