#pragma once
// Internal to gleaner_shared's crypto sources (never include it from a public header: OpenSSL is linked
// privately). OpenSSL reports failures on a thread-local queue; a message that drops them leaves the user
// with "signing failed" and nothing to search for, and a queue that is never drained blames the next caller.

#include <QString>

#include <openssl/err.h>

namespace gleaner::crypto_detail {

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
