#include "PolicyEnrollment.h"

#include "JsonFile.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonObject>
#include <QRegularExpression>
#include <QUrl>

namespace gleaner::agent {

QString PolicyEnrollment::normalizeFingerprint(const QString& text)
{
    QString hex;
    for (const QChar c : text) {
        if (c == u':' || c == u' ')
            continue;
        hex += c.toUpper();
    }
    static const QRegularExpression sha256(QStringLiteral("^[0-9A-F]{64}$"));
    return sha256.match(hex).hasMatch() ? hex : QString();
}

Result<std::optional<PolicyEnrollment>> PolicyEnrollment::parse(const QJsonValue& value, const QString& file)
{
    if (value.isUndefined())
        return std::optional<PolicyEnrollment>();
    const QString expected = QStringLiteral(
        "\"enrollment\" holds \"url\", \"token\" or \"token_file\", and optionally \"certificate_sha256\" and "
        "\"name_prefix\" (docs/fleet.md)");
    if (!value.isObject())
        return fail(QStringLiteral("%1: \"enrollment\" is not an object; %2").arg(file, expected));
    const QJsonObject object = value.toObject();
    static const QStringList known{QStringLiteral("url"), QStringLiteral("token"), QStringLiteral("token_file"),
                                   QStringLiteral("certificate_sha256"), QStringLiteral("name_prefix")};
    for (auto it = object.begin(); it != object.end(); ++it) {
        if (!known.contains(it.key()))
            return fail(QStringLiteral("%1: unknown key \"enrollment.%2\"; %3").arg(file, it.key(), expected));
        if (!it.value().isString())
            return fail(QStringLiteral("%1: \"enrollment.%2\" is not a string").arg(file, it.key()));
    }
    PolicyEnrollment enrollment;
    enrollment.url = object.value(QStringLiteral("url")).toString();
    const QUrl url(enrollment.url);
    if (!url.isValid() || url.scheme() != u"https" || url.host().isEmpty())
        return fail(QStringLiteral("%1: \"enrollment.url\" must be the coordinator's https://HOST:PORT, not \"%2\"")
                        .arg(file, enrollment.url));
    const bool inline_ = object.contains(QStringLiteral("token"));
    const bool fromFile = object.contains(QStringLiteral("token_file"));
    if (inline_ == fromFile)
        return fail(QStringLiteral("%1: \"enrollment\" needs exactly one of \"token\" and \"token_file\"").arg(file));
    enrollment.token = object.value(QStringLiteral("token")).toString().trimmed();
    enrollment.tokenFile = object.value(QStringLiteral("token_file")).toString();
    if (inline_ && enrollment.token.isEmpty())
        return fail(QStringLiteral("%1: \"enrollment.token\" is empty").arg(file));
    if (fromFile && !QFileInfo(enrollment.tokenFile).isAbsolute())
        return fail(QStringLiteral("%1: \"enrollment.token_file\" must be an absolute path, not \"%2\"")
                        .arg(file, enrollment.tokenFile));
    if (object.contains(QStringLiteral("certificate_sha256"))) {
        const QString given = object.value(QStringLiteral("certificate_sha256")).toString();
        enrollment.certificateSha256 = normalizeFingerprint(given);
        if (enrollment.certificateSha256.isEmpty())
            return fail(QStringLiteral("%1: \"enrollment.certificate_sha256\" is not a SHA-256 fingerprint (64 hex "
                                       "digits, as `gleaner-coordinator init` prints it): \"%2\"")
                            .arg(file, given));
    }
    enrollment.namePrefix = object.value(QStringLiteral("name_prefix")).toString();
    static const QRegularExpression safe(QStringLiteral("^[A-Za-z0-9._-]{0,32}$"));
    if (!safe.match(enrollment.namePrefix).hasMatch())
        return fail(QStringLiteral("%1: \"enrollment.name_prefix\" takes up to 32 letters, digits, '.', '_' or '-'")
                        .arg(file));
    return std::optional<PolicyEnrollment>(enrollment);
}

Result<std::optional<PolicyEnrollment>> PolicyEnrollment::read(const QString& policyFile)
{
    if (policyFile.isEmpty() || !QFileInfo::exists(policyFile))
        return std::optional<PolicyEnrollment>();
    const ReadJson read = readJsonObject(policyFile);
    if (!read.problem.isEmpty())
        return fail(QStringLiteral("%1 %2").arg(policyFile, read.problem));
    auto parsed = parse(read.object.value(QStringLiteral("enrollment")), policyFile);
    if (!parsed || !*parsed || (*parsed)->tokenFile.isEmpty())
        return parsed;
    PolicyEnrollment enrollment = **parsed;
    QFile token(enrollment.tokenFile);
    if (!token.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: \"enrollment.token_file\" %2 cannot be read: %3 (it should be readable by the "
                                   "agent's user, e.g. root:gleaner 0640)")
                        .arg(policyFile, enrollment.tokenFile, token.errorString()));
    enrollment.token = QString::fromUtf8(token.read(4096)).trimmed();
    if (enrollment.token.isEmpty())
        return fail(QStringLiteral("%1: \"enrollment.token_file\" %2 holds no token").arg(policyFile, enrollment.tokenFile));
    return std::optional<PolicyEnrollment>(enrollment);
}

} // namespace gleaner::agent
