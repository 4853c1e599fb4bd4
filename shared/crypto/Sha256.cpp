#include "crypto/Sha256.h"

#include "crypto/OpenSslError.h"

#include <QFile>
#include <QIODevice>

#include <openssl/evp.h>

namespace gleaner {

void Sha256::ContextDeleter::operator()(evp_md_ctx_st* context) const
{
    EVP_MD_CTX_free(context);
}

Sha256::Sha256()
{
    reset();
}

Sha256::~Sha256() = default;

Sha256::Sha256(Sha256&& other) noexcept
    : m_context(std::move(other.m_context)), m_error(std::move(other.m_error))
{
    other.m_error = QStringLiteral("this SHA-256 hasher was moved from; call reset() before using it again");
}

Sha256& Sha256::operator=(Sha256&& other) noexcept
{
    if (this != &other) {
        m_context = std::move(other.m_context);
        m_error = std::move(other.m_error);
        other.m_error =
            QStringLiteral("this SHA-256 hasher was moved from; call reset() before using it again");
    }
    return *this;
}

void Sha256::failWith(const char* step)
{
    m_context.reset();
    m_error = QStringLiteral("OpenSSL could not %1 SHA-256 (%2); check the OpenSSL installation and its "
                             "configuration (OPENSSL_CONF, providers)")
                  .arg(QLatin1StringView(step), crypto_detail::takeOpenSslErrors());
}

void Sha256::reset()
{
    m_error.clear();
    if (!m_context)
        m_context.reset(EVP_MD_CTX_new());
    if (!m_context) {
        failWith("allocate");
        return;
    }
    if (EVP_DigestInit_ex(m_context.get(), EVP_sha256(), nullptr) != 1)
        failWith("start");
}

void Sha256::addData(QByteArrayView data)
{
    if (!m_context || data.isEmpty())
        return;
    if (EVP_DigestUpdate(m_context.get(), data.data(), size_t(data.size())) != 1)
        failWith("update");
}

QByteArray Sha256::result() const
{
    if (!m_context)
        return {};
    // Finalising a copy leaves this context open, so the caller can keep adding data (a download that
    // reports the hash of what it has so far) and ask again.
    std::unique_ptr<evp_md_ctx_st, ContextDeleter> copy(EVP_MD_CTX_new());
    QByteArray digest(kDigestSize, Qt::Uninitialized);
    unsigned int length = 0;
    if (!copy || EVP_MD_CTX_copy_ex(copy.get(), m_context.get()) != 1 ||
        EVP_DigestFinal_ex(copy.get(), reinterpret_cast<unsigned char*>(digest.data()), &length) != 1 ||
        length != unsigned(kDigestSize)) {
        ERR_clear_error();
        return {};
    }
    return digest;
}

QByteArray Sha256::hash(QByteArrayView data)
{
    Sha256 hasher;
    hasher.addData(data);
    return hasher.result();
}

Result<QByteArray> Sha256::hashFile(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(
            QStringLiteral("cannot open %1 to compute its SHA-256: %2").arg(path, file.errorString()));
    return hashDevice(&file).context(path);
}

Result<QByteArray> Sha256::hashDevice(QIODevice* device)
{
    if (!device)
        return fail(QStringLiteral("cannot compute a SHA-256: no device was given"));
    if (!device->isReadable())
        return fail(QStringLiteral("cannot compute a SHA-256: the device is not open for reading"));

    Sha256 hasher;
    // One buffer for the whole stream: memory stays at kChunkSize whatever the file size.
    QByteArray buffer(kChunkSize, Qt::Uninitialized);
    qint64 total = 0;
    for (;;) {
        const qint64 count = device->read(buffer.data(), buffer.size());
        if (count < 0)
            return fail(QStringLiteral("reading failed after %1 bytes while computing its SHA-256: %2")
                            .arg(total)
                            .arg(device->errorString()));
        if (count == 0)
            break;
        hasher.addData(QByteArrayView(buffer.constData(), qsizetype(count)));
        total += count;
    }
    QByteArray digest = hasher.result();
    if (digest.isEmpty())
        return fail(hasher.errorString().isEmpty() ? QStringLiteral("OpenSSL could not finish SHA-256")
                                                   : hasher.errorString());
    return digest;
}

QString Sha256::toHex(QByteArrayView digest)
{
    return QString::fromLatin1(digest.toByteArray().toHex());
}

bool Sha256::isHexDigest(QStringView text)
{
    if (text.size() != kHexSize)
        return false;
    for (QChar c : text) {
        const char16_t u = c.unicode();
        if (!((u >= u'0' && u <= u'9') || (u >= u'a' && u <= u'f')))
            return false;
    }
    return true;
}

} // namespace gleaner
