#include "aggregation/UpdateChecker.h"

#include "codec/UpdateCodec.h"
#include "format/SafeTensors.h"
#include "ml/WeightMath.h"

#include <QFile>
#include <QScopeGuard>

#include <cmath>
#include <cstring>
#include <memory>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gleaner::coordinator {

Result<const BaseWeightsCache::Entry*> BaseWeightsCache::get(const QString& sha256, const QString& path)
{
    for (auto it = m_entries.begin(); it != m_entries.end(); ++it) {
        if (it->sha256 != sha256)
            continue;
        if (it != m_entries.begin()) {
            Entry entry = std::move(*it);
            m_entries.erase(it);
            m_entries.push_front(std::move(entry));
        }
        return &m_entries.front();
    }
    auto weights = SafeTensors::load(path);
    if (!weights)
        return fail(weights.error());
    const double norm = ml::WeightMath::l2Norm(*weights);
    if (!std::isfinite(norm))
        return fail(QStringLiteral("the norm of the weights file %1 cannot be computed").arg(sha256));
    m_entries.push_front(Entry{sha256, std::move(*weights), norm});
    while (m_entries.size() > kEntries)
        m_entries.pop_back();
    return &m_entries.front();
}

namespace UpdateChecker {
namespace {

// An integer tensor's element `i` as a signed 64-bit value (the dtypes integer buffers come in).
std::optional<qint64> integerAt(const TensorBundle& bundle, const TensorEntry& entry, qint64 i)
{
    const char* at = bundle.data(entry).data() + i * dtypeSize(entry.dtype);
    switch (entry.dtype) {
    case DType::I64: { qint64 v; std::memcpy(&v, at, sizeof v); return v; }
    case DType::I32: { qint32 v; std::memcpy(&v, at, sizeof v); return v; }
    case DType::I16: { qint16 v; std::memcpy(&v, at, sizeof v); return v; }
    case DType::I8: return qint64(qint8(*at));
    case DType::U8: return qint64(quint8(*at));
    case DType::Bool: return qint64(*at != 0);
    default: return std::nullopt;
    }
}

} // namespace

// Integer buffers count mini-batches: the subtask's weights may hold the base's count plus at most the
// mini-batches it ran, never less. Anything else (INT64_MAX, a negative count) would stay in the server copy.
Status checkCounters(const TensorBundle& update, const TensorBundle& base, qint64 maxSteps)
{
    for (const TensorEntry& entry : update.entries()) {
        if (dtypeIsFloating(entry.dtype))
            continue;
        const TensorEntry* from = base.find(entry.name);
        if (!from || from->dtype != entry.dtype || from->byteSize != entry.byteSize)
            return fail(QStringLiteral("tensor \"%1\" does not match the weights it was trained from").arg(entry.name));
        for (qint64 i = 0; i < entry.elementCount(); ++i) {
            const auto value = integerAt(update, entry, i);
            const auto start = integerAt(base, *from, i);
            if (!value || !start)
                return fail(QStringLiteral("tensor \"%1\": %2 values are not supported")
                                .arg(entry.name, dtypeName(entry.dtype)));
            if (*value < *start || *value - *start > maxSteps)
                return fail(QStringLiteral("tensor \"%1\" counts %2 where the weights it was trained from count %3: "
                                           "a subtask of %4 mini-batches adds between 0 and %4")
                                .arg(entry.name)
                                .arg(*value)
                                .arg(*start)
                                .arg(maxSteps));
        }
    }
    return {};
}

namespace {

// What keeps a mapped upload: unmapped with the last bundle that views it.
struct Mapping
{
    void* at = MAP_FAILED;
    size_t size = 0;
    ~Mapping()
    {
        if (at != MAP_FAILED)
            munmap(at, size);
    }
};

// An upload unpacked where it lies: mapped read-only with its page tables populated up front, and kept by the
// bundle (keepAlive); the descriptor is closed at once (a mapping holds its file). At 5 M parameters this
// saves a 20 MB copy out of the page cache and the faults of 20 MB of fresh pages, which led the profile of
// uploads (docs/scale-out.md). A file that cannot be mapped is read. Only the upload just received is mapped:
// it lies in the coordinator's own folder, never written again (a shortened file would fault); files read
// later, from a folder that other coordinators share, are read (readKept). `unreadable`: the file could not
// be opened.
Result<TensorBundle> unpackUpload(const QString& path, qint64 maxBytes, qint64* uploadBytes, bool* unreadable)
{
    const int fd = ::open(QFile::encodeName(path).constData(), O_RDONLY | O_CLOEXEC);
    struct stat info = {};
    if (fd < 0 || fstat(fd, &info) != 0) {
        if (fd >= 0)
            ::close(fd);
        *unreadable = true;
        return fail(QStringLiteral("cannot open the upload"));
    }
    const auto closeFile = qScopeGuard([fd] { ::close(fd); });
    *uploadBytes = qint64(info.st_size);
    auto mapping = std::make_shared<Mapping>();
    if (info.st_size > 0 && qint64(info.st_size) <= maxBytes) {
        mapping->size = size_t(info.st_size);
        mapping->at = mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    }
    if (mapping->at == MAP_FAILED) {
        QFile file;
        if (!file.open(fd, QIODevice::ReadOnly | QIODevice::Unbuffered)) {
            *unreadable = true;
            return fail(file.errorString());
        }
        return UpdateCodec::unpack(file.readAll(), maxBytes);
    }
    const QByteArray bytes =
        QByteArray::fromRawData(static_cast<const char*>(mapping->at), qsizetype(info.st_size));
    auto bundle = UpdateCodec::unpack(bytes, maxBytes);
    if (bundle && bundle->buffer().constData() == bytes.constData())
        bundle->keepAlive(std::move(mapping)); // else it was decompressed into a buffer of its own
    return bundle;
}

} // namespace

qint64 maxUploadBytes(const TensorBundle& schema)
{
    // Names, shapes and offsets in JSON take well under 200 bytes a tensor; metadata is a few short strings.
    return schema.tensorBytes() + 256 * schema.size() + 64 * 1024;
}

Result<ReceivedUpdate> check(const QString& path, const UpdateExpectations& expected,
                             const BaseWeightsCache::Entry& base)
{
    // The agent's messages must not carry the coordinator's file names.
    qint64 uploadBytes = 0;
    bool unreadable = false;
    auto bundle = unpackUpload(path, maxUploadBytes(expected.schema), &uploadBytes, &unreadable);
    if (!bundle && unreadable)
        return fail(QStringLiteral("the coordinator cannot read the upload back; try again later"));
    if (!bundle)
        return fail(QStringLiteral("the result is not a valid safetensors file: %1").arg(bundle.error()));
    // An encoded update becomes full weights here, and every check below is the one full weights pass.
    auto encoding = UpdateCodec::encodingOf(*bundle);
    if (!encoding)
        return fail(encoding.error());
    if (*encoding != UploadSpec::Encoding::Fp32) {
        if (*encoding != expected.upload.encoding)
            return fail(QStringLiteral("the result is encoded as %1, but its job takes %2 (or full fp32 weights)")
                            .arg(UploadSpec::encodingNames().at(int(*encoding)), expected.upload.encodingName()));
        auto decoded = UpdateCodec::decode(*bundle, base.weights);
        if (!decoded)
            return fail(QStringLiteral("the result's %1 update cannot be decoded: %2")
                            .arg(UploadSpec::encodingNames().at(int(*encoding)), decoded.error()));
        bundle = std::move(*decoded);
    }
    if (auto s = ml::WeightMath::checkCompatible(expected.schema, *bundle); !s)
        return fail(QStringLiteral("the result does not match the model: %1").arg(s.error()));
    QString where;
    if (!ml::WeightMath::allFinite(*bundle, &where))
        return fail(QStringLiteral("the result holds NaN or infinite values in tensor \"%1\"").arg(where));

    ReceivedUpdate update;
    update.encoding = *encoding;
    update.uploadBytes = uploadBytes;
    const auto& meta = bundle->metadata();
    bool ok = false;
    update.baseVersion = meta.value(QStringLiteral("gleaner.base_version")).toLongLong(&ok);
    if (!ok || update.baseVersion < 0)
        return fail(QStringLiteral("the result's metadata lacks gleaner.base_version (the version it trained from)"));
    const QString nonce = meta.value(QStringLiteral("gleaner.nonce"));
    if (nonce.isEmpty())
        return fail(QStringLiteral("the result's metadata lacks gleaner.nonce (the nonce of its lease's manifest); "
                                   "the agent is older than this coordinator and must be updated"));
    if (nonce != expected.nonce)
        return fail(QStringLiteral("the result's gleaner.nonce is not its lease's: the file was made for another "
                                   "lease"));
    update.samples = meta.value(QStringLiteral("gleaner.samples")).toLongLong(&ok);
    if (!ok || update.samples <= 0)
        return fail(QStringLiteral("the result's metadata lacks a positive gleaner.samples"));
    if (update.samples > expected.maxSamples)
        return fail(QStringLiteral("the result's gleaner.samples is %1, but its subtask has %2 samples to train")
                        .arg(update.samples)
                        .arg(expected.maxSamples));
    update.loss = meta.value(QStringLiteral("gleaner.loss"), QStringLiteral("0")).toDouble(&ok);
    if (!ok || !std::isfinite(update.loss))
        return fail(QStringLiteral("the result's gleaner.loss is not a finite number"));
    update.trainSeconds = meta.value(QStringLiteral("gleaner.train_seconds"), QStringLiteral("0")).toDouble(&ok);
    if (!ok || !std::isfinite(update.trainSeconds) || update.trainSeconds < 0)
        return fail(QStringLiteral("the result's gleaner.train_seconds is not a non-negative number"));

    if (auto s = checkCounters(*bundle, base.weights, expected.maxSteps); !s)
        return fail(QStringLiteral("the result's counters are impossible: %1").arg(s.error()));
    auto step = ml::WeightMath::l2Distance(*bundle, base.weights);
    if (!step || !std::isfinite(*step))
        return fail(QStringLiteral("the distance of the result from its base weights cannot be computed; the "
                                   "result is refused"));
    update.step = *step;
    update.baseNorm = base.norm;
    if (!expected.firstResultPath.isEmpty()) {
        // Read only when there is one to compare with; a first result that cannot be read means no comparison.
        if (auto first = readKept(expected.firstResultPath, maxUploadBytes(expected.schema),
                                  [&]() -> Result<TensorBundle> { return base.weights; })) {
            if (auto distance = ml::WeightMath::l2Distance(*bundle, *first); distance && std::isfinite(*distance))
                update.replicaDistance = *distance;
        }
    }
    update.weights = std::move(*bundle);
    return update;
}

Result<TensorBundle> readKept(const QString& path, qint64 maxBytes, const std::function<Result<TensorBundle>()>& base)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: %2").arg(path, file.errorString()));
    auto bundle = UpdateCodec::unpack(file.readAll(), maxBytes);
    if (!bundle)
        return fail(QStringLiteral("%1: %2").arg(path, bundle.error()));
    auto encoding = UpdateCodec::encodingOf(*bundle);
    if (!encoding)
        return fail(QStringLiteral("%1: %2").arg(path, encoding.error()));
    if (*encoding == UploadSpec::Encoding::Fp32)
        return bundle;
    auto weights = base();
    if (!weights)
        return fail(QStringLiteral("%1 is an encoded update whose base cannot be read: %2").arg(path, weights.error()));
    auto decoded = UpdateCodec::decode(*bundle, *weights);
    if (!decoded)
        return fail(QStringLiteral("%1: %2").arg(path, decoded.error()));
    return decoded;
}

} // namespace UpdateChecker
} // namespace gleaner::coordinator
