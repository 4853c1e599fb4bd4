#pragma once
// Ed25519 keys for signed task manifests: the coordinator holds a SigningKey and signs every manifest; each
// agent pins the coordinator's VerifyKey at enrollment and refuses any manifest that does not verify with it.
// Everything goes through OpenSSL 3's EVP API and standard formats (PKCS#8 and SubjectPublicKeyInfo PEM), so
// `openssl genpkey -algorithm ed25519` keys work here and `openssl pkeyutl -rawin` checks our signatures.

#include "Result.h"

#include <QByteArray>
#include <QByteArrayView>
#include <QString>

#include <memory>

struct evp_pkey_st; // OpenSSL's EVP_PKEY; declared here so this header does not pull in OpenSSL.

namespace gleaner {

// A public key: a plain value (its 32 raw bytes), cheap to copy, compare and keep in settings.
class VerifyKey
{
public:
    static constexpr qsizetype kRawSize = 32;
    static constexpr qsizetype kSignatureSize = 64;

    VerifyKey() = default; // a null key, which verifies nothing

    // SubjectPublicKeyInfo PEM ("-----BEGIN PUBLIC KEY-----"), as `openssl pkey -pubout` writes it.
    static Result<VerifyKey> fromPem(QByteArrayView pem);
    static Result<VerifyKey> fromRaw(QByteArrayView raw);

    bool isNull() const { return m_raw.isEmpty(); }
    QByteArray toPem() const;
    QByteArray raw() const { return m_raw; }
    // Lowercase hex SHA-256 of the raw key: what an operator compares to pin a coordinator.
    QString fingerprint() const;

    // True only for a valid 64-byte Ed25519 signature of exactly these bytes. A null key, a signature of the
    // wrong length or any OpenSSL failure gives false; nothing a peer sends can make this crash or throw.
    bool verify(QByteArrayView message, QByteArrayView signature) const;

    friend bool operator==(const VerifyKey& a, const VerifyKey& b) { return a.m_raw == b.m_raw; }

private:
    explicit VerifyKey(QByteArray raw) : m_raw(std::move(raw)) {}

    QByteArray m_raw;
};

// A private key. Movable, not copyable: the fewer copies of a private key live in memory, the fewer there are
// to leak.
class SigningKey
{
public:
    SigningKey(); // a null key; sign() gives an empty signature, which never verifies
    ~SigningKey();
    SigningKey(SigningKey&& other) noexcept;
    SigningKey& operator=(SigningKey&& other) noexcept;
    SigningKey(const SigningKey&) = delete;
    SigningKey& operator=(const SigningKey&) = delete;

    // A fresh key from OpenSSL's CSPRNG.
    static Result<SigningKey> generate();
    // The RFC 8032 32-byte private seed (what the test vectors give).
    static Result<SigningKey> fromRawSeed(QByteArrayView seed);
    // Unencrypted PKCS#8 PEM ("-----BEGIN PRIVATE KEY-----"), as `openssl genpkey -algorithm ed25519` writes.
    // The caller owns `pem` and should wipe it when done.
    static Result<SigningKey> fromPem(QByteArrayView pem);
    // Refuses a file that other users can read or change (any group or world permission bit) with a message
    // that names the path and the `chmod 600` that fixes it, as ssh does for its keys.
    static Result<SigningKey> loadFromFile(const QString& path);

    bool isNull() const { return m_key == nullptr; }
    // PKCS#8 PEM. The caller owns the bytes and should wipe them (OPENSSL_cleanse, or overwrite) when done.
    QByteArray toPem() const;
    // Writes toPem() to `path` with mode 0600, atomically: a temporary file in the same folder is created
    // with 0600 before any byte is written, filled, flushed to disk and renamed over `path`, so a crash never
    // leaves a half-written key and no other user can read the key at any moment. Refuses when `path` is a
    // symbolic link rather than replacing or following it.
    Status saveToFile(const QString& path) const;

    // The 64-byte signature of `message`; empty only for a null key (or if OpenSSL runs out of memory).
    QByteArray sign(QByteArrayView message) const;
    VerifyKey publicKey() const;

private:
    struct KeyDeleter
    {
        void operator()(evp_pkey_st* key) const;
    };
    using KeyPtr = std::unique_ptr<evp_pkey_st, KeyDeleter>;

    explicit SigningKey(KeyPtr key);

    KeyPtr m_key;
};

} // namespace gleaner
