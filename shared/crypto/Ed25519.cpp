#include "crypto/Ed25519.h"

#include "crypto/OpenSslError.h"
#include "crypto/SecureFile.h"
#include "crypto/Sha256.h"

#include <QLoggingCategory>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <sys/stat.h>

namespace gleaner {
namespace {

Q_LOGGING_CATEGORY(lcCrypto, "gleaner.shared.crypto")

// A PEM Ed25519 key is about 120 bytes; the cap keeps a wrong path (a log, a dataset) from being read whole.
constexpr qsizetype kMaxPemSize = 64 * 1024;

using namespace crypto_detail;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX_free>>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, Deleter<EVP_MD_CTX_free>>;

// OpenSSL wants a non-null pointer even for zero bytes in some paths; an empty QByteArrayView may have none.
const unsigned char* bytesOf(QByteArrayView view)
{
    static const unsigned char empty = 0;
    return view.data() ? reinterpret_cast<const unsigned char*>(view.data()) : &empty;
}

QString typeName(const EVP_PKEY* key)
{
    const char* name = EVP_PKEY_get0_type_name(key);
    return name ? QString::fromLatin1(name) : QStringLiteral("unknown");
}

bool isEd25519(const EVP_PKEY* key)
{
    return EVP_PKEY_get_base_id(key) == EVP_PKEY_ED25519;
}

QByteArray rawPublicKey(const EVP_PKEY* key)
{
    QByteArray raw(VerifyKey::kRawSize, Qt::Uninitialized);
    size_t length = size_t(raw.size());
    if (EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(raw.data()), &length) != 1 ||
        length != size_t(VerifyKey::kRawSize)) {
        ERR_clear_error();
        return {};
    }
    return raw;
}

} // namespace

// ---- VerifyKey
// ---------------------------------------------------------------------------------------------

Result<VerifyKey> VerifyKey::fromRaw(QByteArrayView raw)
{
    if (raw.size() != kRawSize)
        return fail(
            QStringLiteral("an Ed25519 public key is %1 bytes, got %2").arg(kRawSize).arg(raw.size()));
    return VerifyKey(raw.toByteArray());
}

Result<VerifyKey> VerifyKey::fromPem(QByteArrayView pem)
{
    if (pem.size() > kMaxPemSize)
        return fail(QStringLiteral("a PEM public key is a few hundred bytes, got %1; is this the right file?")
                        .arg(pem.size()));
    BioPtr bio = readBio(pem);
    PkeyPtr key(bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, refusePassphrase, nullptr) : nullptr);
    if (!key) {
        const QString detail = crypto_detail::takeOpenSslErrors();
        if (pem.contains(QByteArrayView("PRIVATE KEY")))
            return fail(QStringLiteral("this is a private key, not a public one; give the public key "
                                       "(`openssl pkey -in KEY -pubout`) and keep the private key secret"));
        return fail(
            QStringLiteral("not a PEM public key (expected \"-----BEGIN PUBLIC KEY-----\"): %1").arg(detail));
    }
    if (!isEd25519(key.get()))
        return fail(QStringLiteral("the public key is %1, not Ed25519").arg(typeName(key.get())));
    QByteArray raw = rawPublicKey(key.get());
    if (raw.isEmpty())
        return fail(QStringLiteral("OpenSSL could not export the Ed25519 public key"));
    return VerifyKey(std::move(raw));
}

QByteArray VerifyKey::toPem() const
{
    if (isNull())
        return {};
    PkeyPtr key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, bytesOf(m_raw), size_t(m_raw.size())));
    BioPtr bio(BIO_new(BIO_s_mem()));
    if (!key || !bio || PEM_write_bio_PUBKEY(bio.get(), key.get()) != 1) {
        qCWarning(lcCrypto) << "cannot write an Ed25519 public key as PEM:"
                            << crypto_detail::takeOpenSslErrors();
        return {};
    }
    return bioContents(bio.get());
}

QString VerifyKey::fingerprint() const
{
    return isNull() ? QString() : Sha256::toHex(Sha256::hash(m_raw));
}

bool VerifyKey::verify(QByteArrayView message, QByteArrayView signature) const
{
    if (isNull() || signature.size() != kSignatureSize)
        return false;
    // Built per call from the raw bytes: keeps VerifyKey a plain value, and costs microseconds next to the
    // verification itself.
    PkeyPtr key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, bytesOf(m_raw), size_t(m_raw.size())));
    MdCtxPtr context(EVP_MD_CTX_new());
    const bool valid = key && context &&
                       EVP_DigestVerifyInit(context.get(), nullptr, nullptr, nullptr, key.get()) == 1 &&
                       EVP_DigestVerify(context.get(), bytesOf(signature), size_t(signature.size()),
                                        bytesOf(message), size_t(message.size())) == 1;
    // A bad signature leaves an entry on the queue; drop it so it is not blamed on the next caller.
    ERR_clear_error();
    return valid;
}

// ---- SigningKey
// --------------------------------------------------------------------------------------------

void SigningKey::KeyDeleter::operator()(evp_pkey_st* key) const
{
    EVP_PKEY_free(key);
}

SigningKey::SigningKey() = default;
SigningKey::~SigningKey() = default;
SigningKey::SigningKey(SigningKey&& other) noexcept = default;
SigningKey& SigningKey::operator=(SigningKey&& other) noexcept = default;
SigningKey::SigningKey(KeyPtr key) : m_key(std::move(key)) {}

Result<SigningKey> SigningKey::generate()
{
    PkeyCtxPtr context(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr));
    EVP_PKEY* key = nullptr;
    if (!context || EVP_PKEY_keygen_init(context.get()) != 1 || EVP_PKEY_keygen(context.get(), &key) != 1)
        return fail(QStringLiteral("OpenSSL could not generate an Ed25519 key: %1")
                        .arg(crypto_detail::takeOpenSslErrors()));
    return SigningKey(KeyPtr(key));
}

Result<SigningKey> SigningKey::fromRawSeed(QByteArrayView seed)
{
    if (seed.size() != 32)
        return fail(QStringLiteral("an Ed25519 private seed is 32 bytes, got %1").arg(seed.size()));
    KeyPtr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, bytesOf(seed), size_t(seed.size())));
    if (!key)
        return fail(QStringLiteral("OpenSSL could not build an Ed25519 key from the seed: %1")
                        .arg(crypto_detail::takeOpenSslErrors()));
    return SigningKey(std::move(key));
}

Result<SigningKey> SigningKey::fromPem(QByteArrayView pem)
{
    if (pem.size() > kMaxPemSize)
        return fail(
            QStringLiteral("a PEM private key is a few hundred bytes, got %1; is this the right file?")
                .arg(pem.size()));
    if (pem.contains(QByteArrayView("ENCRYPTED PRIVATE KEY")))
        return fail(
            QStringLiteral("the private key is protected by a passphrase, which a service cannot type; "
                           "write an unencrypted copy (`openssl pkey -in KEY -out NEW`) and protect it "
                           "with `chmod 600 NEW` instead"));
    BioPtr bio = readBio(pem);
    KeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, refusePassphrase, nullptr) : nullptr);
    if (!key)
        return fail(
            QStringLiteral("not a PEM private key (expected \"-----BEGIN PRIVATE KEY-----\" as written "
                           "by `openssl genpkey -algorithm ed25519`): %1")
                .arg(crypto_detail::takeOpenSslErrors()));
    if (!isEd25519(key.get()))
        return fail(QStringLiteral("the private key is %1, not Ed25519; make one with "
                                   "`openssl genpkey -algorithm ed25519`")
                        .arg(typeName(key.get())));
    return SigningKey(std::move(key));
}

Result<SigningKey> SigningKey::loadFromFile(const QString& path)
{
    Result<QByteArray> pem =
        SecureFile::read(path, QStringLiteral("private key"), kMaxPemSize, S_IRWXG | S_IRWXO,
                         QStringLiteral("anyone who can read it can sign as this coordinator"));
    if (!pem.ok())
        return fail(pem.error());
    Result<SigningKey> key = fromPem(*pem);
    SecureFile::wipe(*pem);
    return std::move(key).context(path);
}

QByteArray SigningKey::toPem() const
{
    if (isNull())
        return {};
    // A secure-memory BIO is wiped when freed, so the PEM text leaves no copy in OpenSSL's buffers.
    BioPtr bio(BIO_new(BIO_s_secmem()));
    if (!bio ||
        PEM_write_bio_PKCS8PrivateKey(bio.get(), m_key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
        qCWarning(lcCrypto) << "cannot write an Ed25519 private key as PEM:"
                            << crypto_detail::takeOpenSslErrors();
        return {};
    }
    return bioContents(bio.get());
}

Status SigningKey::saveToFile(const QString& path) const
{
    if (isNull())
        return fail(QStringLiteral("cannot save %1: there is no private key to save").arg(path));
    QByteArray pem = toPem();
    if (pem.isEmpty())
        return fail(QStringLiteral("cannot save %1: OpenSSL could not encode the private key").arg(path));
    Status saved = SecureFile::write(path, pem, S_IRUSR | S_IWUSR, QStringLiteral("private key"));
    SecureFile::wipe(pem);
    return saved;
}

QByteArray SigningKey::sign(QByteArrayView message) const
{
    if (isNull()) {
        qCWarning(lcCrypto) << "sign() called on a null SigningKey; the empty signature will not verify";
        return {};
    }
    MdCtxPtr context(EVP_MD_CTX_new());
    QByteArray signature(VerifyKey::kSignatureSize, Qt::Uninitialized);
    size_t length = size_t(signature.size());
    // Ed25519 hashes internally (PureEdDSA): no digest is named, and signing is one shot over the whole
    // message.
    if (!context || EVP_DigestSignInit(context.get(), nullptr, nullptr, nullptr, m_key.get()) != 1 ||
        EVP_DigestSign(context.get(), reinterpret_cast<unsigned char*>(signature.data()), &length,
                       bytesOf(message), size_t(message.size())) != 1 ||
        length != size_t(VerifyKey::kSignatureSize)) {
        qCWarning(lcCrypto) << "Ed25519 signing failed:" << crypto_detail::takeOpenSslErrors();
        return {};
    }
    return signature;
}

VerifyKey SigningKey::publicKey() const
{
    if (isNull())
        return {};
    Result<VerifyKey> key = VerifyKey::fromRaw(rawPublicKey(m_key.get()));
    return key.ok() ? std::move(key).value() : VerifyKey();
}

} // namespace gleaner
