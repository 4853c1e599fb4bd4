#include "config/Enroller.h"

#include "config/PinnedKeys.h"
#include "crypto/Ed25519.h"
#include "crypto/SecureFile.h"
#include "crypto/TlsCertificate.h"
#include "gpu/NvmlGpuProbe.h"
#include "net/CoordinatorClient.h"
#include "net/CurlTransport.h"
#include "util/Clock.h"

#include <QDir>
#include <QFile>
#include <QSysInfo>
#include <QThread>
#include <QUrl>

namespace gleaner::agent {

MachineHardware machineHardware(const QString& nvmlLibrary)
{
    MachineHardware hardware;
    QJsonObject& info = hardware.capabilities;
    info = QJsonObject{{QStringLiteral("cores"), QThread::idealThreadCount()},
                       {QStringLiteral("arch"), QSysInfo::currentCpuArchitecture()}};
    QFile meminfo(QStringLiteral("/proc/meminfo"));
    if (meminfo.open(QIODevice::ReadOnly)) {
        const QByteArray first = meminfo.readLine(); // "MemTotal:       24576000 kB"
        const QList<QByteArray> fields = first.simplified().split(' ');
        if (fields.size() >= 2)
            info.insert(QStringLiteral("ram_mb"), fields[1].toLongLong() / 1024);
    }
    NvmlGpuProbe gpu(nvmlLibrary); // no driver: no GPU fields, never an error
    const GpuObservation seen = gpu.sample();
    if (seen.known && seen.count > 0) {
        info.insert(QStringLiteral("gpu"), seen.name);
        info.insert(QStringLiteral("gpus"), seen.count);
    }
    const int count = seen.known ? seen.count : 0;
    hardware.gpu = QJsonObject{
        {QStringLiteral("count"), count},
        {QStringLiteral("name"), count > 0 ? QJsonValue(seen.name) : QJsonValue(QJsonValue::Null)},
        {QStringLiteral("note"),
         seen.known ? QJsonValue(QJsonValue::Null) : QJsonValue(gpu.unavailableReason())}};
    hardware.gpuDriverMissing = gpu.driverMissing();
    return hardware;
}

Result<AgentConfig> enrollAgent(const EnrollOptions& options)
{
    const QUrl url(options.url);
    if (!url.isValid() || url.scheme() != u"https" || url.host().isEmpty() || (!url.path().isEmpty() && url.path() != u"/"))
        return fail(QStringLiteral("\"%1\" is not a coordinator URL; expected https://HOST:PORT (the URL "
                                   "`gleaner-coordinator init` printed)")
                        .arg(options.url));
    const QString baseUrl = url.adjusted(QUrl::RemovePath | QUrl::StripTrailingSlash).toString();
    if (AgentConfig::isEnrolled(options.dataDir))
        return fail(QStringLiteral("%1 already holds an enrolled agent; use another --data-dir, or remove that one "
                                   "if it is no longer wanted")
                        .arg(options.dataDir));
    QByteArray caPem;
    if (!options.caFile.isEmpty()) {
        QFile ca(options.caFile);
        if (!ca.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("%1: cannot read the certificate to pin: %2").arg(options.caFile, ca.errorString()));
        caPem = ca.readAll();
        if (auto fingerprint = TlsCertificate::fingerprint(caPem); !fingerprint)
            return fail(QStringLiteral("%1 is not a PEM certificate: %2").arg(options.caFile, fingerprint.error()));
    }
    if (!QDir().mkpath(options.dataDir)
        || !QFile::setPermissions(options.dataDir, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner))
        return fail(QStringLiteral("%1: cannot create the agent's data folder").arg(options.dataDir));

    CurlTransport transport(options.caFile);
    SystemClock clock;
    RetryOptions retry;
    retry.maxAttempts = 3; // a person is waiting at the terminal
    CoordinatorClient client(transport, baseUrl, clock, RetryPolicy(retry));
    EnrollRequest request;
    request.name = options.name.isEmpty() ? QSysInfo::machineHostName() : options.name;
    request.platform = QSysInfo::prettyProductName() + QStringLiteral(", Linux ") + QSysInfo::kernelVersion();
    request.hardware = machineHardware().capabilities;
    request.enrollmentToken = options.token;
    auto enrolled = client.enroll(request);
    if (!enrolled)
        return fail(enrolled.error());
    if (auto key = VerifyKey::fromPem(enrolled->signingPublicKeyPem); !key)
        return fail(QStringLiteral("the coordinator sent a signing key that is not an Ed25519 public key: %1").arg(key.error()));

    const QString dir = options.dataDir;
    if (auto s = SecureFile::write(AgentConfig::tokenPath(dir), enrolled->agentToken, 0600, QStringLiteral("agent token")); !s)
        return fail(s.error());
    if (auto s = SecureFile::write(AgentConfig::signingKeyPath(dir), enrolled->signingPublicKeyPem, 0644,
                                   QStringLiteral("coordinator signing key"));
        !s)
        return fail(s.error());
    if (auto s = PinnedKeys::resetHistory(dir); !s)
        return fail(s.error());
    if (!caPem.isEmpty())
        if (auto s = SecureFile::write(AgentConfig::caPath(dir), caPem, 0644, QStringLiteral("coordinator certificate")); !s)
            return fail(s.error());
    AgentConfig config;
    config.coordinatorUrl = baseUrl;
    config.agentId = enrolled->agentId;
    config.name = request.name;
    config.enrolledMs = clock.nowMs();
    // Written last: its presence means the enrollment is complete.
    if (auto s = config.save(dir); !s)
        return fail(s.error());
    return config;
}

} // namespace gleaner::agent
