#pragma once
// Internal to gleaner_shared's crypto sources (never include it from a public header: OpenSSL is linked
// privately). OpenSSL reports failures on a thread-local queue; a message that drops them leaves the user
// with "signing failed" and nothing to search for, and a queue that is never drained blames the next caller.

#include <QString>

#include <QByteArray>
#include <QByteArrayView>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include <memory>

namespace gleaner::crypto_detail {

// Owning pointers for OpenSSL objects: std::unique_ptr<T, Deleter<T_free>>.
template <auto FreeFunction>
struct Deleter
{
    template <typename T>
    void operator()(T* pointer) const
    {
        FreeFunction(pointer);
    }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;

// Without a callback OpenSSL prompts on the terminal for a passphrase: a daemon must never block on that.
inline int refusePassphrase(char*, int, int, void*)
{
    return 0;
}

inline BioPtr readBio(QByteArrayView pem)
{
    return BioPtr(BIO_new_mem_buf(pem.data() ? pem.data() : "", int(pem.size())));
}

inline QByteArray bioContents(BIO* bio)
{
    char* data = nullptr;
    const long length = BIO_get_mem_data(bio, &data);
    return length > 0 ? QByteArray(data, qsizetype(length)) : QByteArray();
}

// Drains this thread's OpenSSL error queue into one line ("error:1E08010C:DECODER routines::unsupported;
// ...").
inline QString takeOpenSslErrors()
{
    QString text;
    while (const unsigned long code = ERR_get_error()) {
        char buffer[256];
        ERR_error_string_n(code, buffer, sizeof(buffer));
        if (!text.isEmpty())
            text += QStringLiteral("; ");
        text += QString::fromLatin1(buffer);
    }
    return text.isEmpty() ? QStringLiteral("OpenSSL gave no detail") : text;
}

} // namespace gleaner::crypto_detail
