#include "http/HttpTypes.h"

#include <QJsonDocument>

namespace gleaner::coordinator {

QByteArray RequestHead::path() const
{
    // A fragment is never sent by a client, so the query is the only suffix to strip; the path stays
    // percent-encoded, because routing on decoded bytes would let "%2F" smuggle a slash.
    const qsizetype query = target.indexOf('?');
    return query < 0 ? target : target.left(query);
}

QByteArray RequestHead::header(QByteArrayView name) const
{
    for (const HttpHeader& field : headers) {
        if (field.name.compare(name, Qt::CaseInsensitive) == 0)
            return field.value;
    }
    return {};
}

QByteArray RequestHead::bearerToken() const
{
    const QByteArray value = header("Authorization").trimmed();
    const qsizetype space = value.indexOf(' ');
    if (space <= 0)
        return {};
    // RFC 9110 makes the scheme case-insensitive; libcurl and browsers all send "Bearer", others may not.
    if (value.left(space).compare("bearer", Qt::CaseInsensitive) != 0)
        return {};
    const QByteArray token = value.mid(space + 1).trimmed();
    // A token with inner blanks is not a bearer token (RFC 6750 token68); refusing it here keeps a
    // "Bearer a b" from being looked up as "a b".
    if (token.contains(' ') || token.contains('\t'))
        return {};
    return token;
}

HttpResponse HttpResponse::json(int status, const QJsonObject& object)
{
    HttpResponse response;
    response.status = status;
    response.contentType = "application/json";
    response.body = QJsonDocument(object).toJson(QJsonDocument::Compact);
    return response;
}

HttpResponse HttpResponse::error(int status, const QString& message)
{
    return json(status, QJsonObject{{QStringLiteral("error"), message}});
}

HttpResponse HttpResponse::file(const QString& path, const QByteArray& etag, const QByteArray& contentType)
{
    HttpResponse response;
    response.status = 200;
    response.contentType = contentType.isEmpty() ? QByteArray("application/octet-stream") : contentType;
    response.filePath = path;
    response.etag = etag;
    return response;
}

} // namespace gleaner::coordinator
