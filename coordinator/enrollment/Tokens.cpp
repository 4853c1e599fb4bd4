#include "enrollment/Tokens.h"

#include "crypto/Sha256.h"

#include <openssl/rand.h>

namespace gleaner::coordinator::Tokens {
namespace {

QByteArray randomBytes(int count)
{
    QByteArray bytes(count, Qt::Uninitialized);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), count) != 1)
        qFatal("OpenSSL's random generator failed; refusing to make a guessable token");
    return bytes;
}

} // namespace

QByteArray generate(QByteArrayView prefix)
{
    return prefix.toByteArray()
           + randomBytes(32).toBase64(QByteArray::Base64UrlEncoding | QByteArray::OmitTrailingEquals);
}

QString hash(QByteArrayView token)
{
    return Sha256::toHex(Sha256::hash(token));
}

QString randomId()
{
    return QString::fromLatin1(randomBytes(16).toHex());
}

} // namespace gleaner::coordinator::Tokens
