#include "codec/UpdateCodec.h"

#include "codec/Half.h"
#include "format/SafeTensors.h"

#include <QSet>

#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

using namespace Qt::StringLiterals;

namespace gleaner::UpdateCodec {
namespace {

QString scaleName(const QString& name)
{
    return name + u"#scale"_s;
}
QString indexName(const QString& name)
{
    return name + u"#index"_s;
}
QString valueName(const QString& name)
{
    return name + u"#value"_s;
}

qint64 chunksOf(qint64 n)
{
    return (n + kChunk - 1) / kChunk;
}

// int8 with one scale per kChunk values: q = round(v / s), s = max |v| / 127 over the chunk.
void quantize(std::span<const float> values, std::span<qint8> q, std::span<float> scales)
{
    for (qint64 c = 0; c < qint64(scales.size()); ++c) {
        const qint64 begin = c * kChunk;
        const qint64 end = std::min<qint64>(begin + kChunk, qint64(values.size()));
        float largest = 0.0f;
        for (qint64 i = begin; i < end; ++i)
            largest = std::max(largest, std::fabs(values[i]));
        const float scale = largest / 127.0f;
        scales[c] = scale;
        for (qint64 i = begin; i < end; ++i)
            q[i] = scale > 0.0f ? qint8(std::clamp(std::nearbyint(values[i] / scale), -127.0f, 127.0f))
                                : qint8(0);
    }
}

float dequantized(std::span<const qint8> q, std::span<const float> scales, qint64 i)
{
    return float(q[i]) * scales[i / kChunk];
}

// Adds `values` in int8 as tensor `name` (of `shape`) and their scales as `<model tensor>#scale`; returns what
// the decoder will make of them.
Result<std::vector<float>> addInt8(TensorBundle& out, const QString& name, const QString& modelTensor,
                                   const QList<qint64>& shape, std::span<const float> values)
{
    const qint64 n = qint64(values.size());
    std::vector<qint8> q(values.size());
    std::vector<float> scales(size_t(chunksOf(n)));
    quantize(values, q, scales);
    if (auto s = out.addValues<qint8>(name, DType::I8, shape, q); !s)
        return fail(s.error());
    if (auto s = out.addValues<float>(scaleName(modelTensor), DType::F32, {qint64(scales.size())}, scales); !s)
        return fail(s.error());
    std::vector<float> decoded(values.size());
    for (qint64 i = 0; i < n; ++i)
        decoded[size_t(i)] = dequantized(q, scales, i);
    return decoded;
}

// Values of the update: trained - base + residual, in one vector per tensor.
std::vector<float> updateOf(std::span<const float> trained, std::span<const float> base,
                            std::span<const float> residual)
{
    std::vector<float> update(trained.size());
    for (size_t i = 0; i < update.size(); ++i)
        update[i] = (trained[i] - base[i]) + (residual.empty() ? 0.0f : residual[i]);
    return update;
}

Status checkScales(const std::vector<float>& scales, const QString& name)
{
    for (const float s : scales)
        if (!std::isfinite(s) || s < 0.0f)
            return fail(u"tensor \"%1\" holds a scale that is negative or not finite"_s.arg(name));
    return {};
}

// A copy of a tensor's values that is aligned whatever the file's layout (a file from another writer need not
// align its tensors).
template <typename T> std::vector<T> alignedValues(const TensorBundle& bundle, const TensorEntry& entry)
{
    std::vector<T> out(size_t(entry.byteSize / qint64(sizeof(T))));
    if (!out.empty())
        std::memcpy(out.data(), bundle.data(entry).data(), size_t(entry.byteSize));
    return out;
}

} // namespace

Result<TensorBundle> encode(const TensorBundle& trained, const TensorBundle& base, const UploadSpec& spec,
                            TensorBundle* residual)
{
    if (!spec.isUpdate()) {
        if (residual)
            *residual = {};
        return trained;
    }
    TensorBundle out;
    TensorBundle left; // the new residual
    const bool useResidual = spec.errorFeedback && residual && !residual->isEmpty();
    for (const TensorEntry& entry : base.entries()) {
        const TensorEntry* mine = trained.find(entry.name);
        if (!mine || mine->dtype != entry.dtype || mine->shape != entry.shape)
            return fail(
                u"tensor \"%1\" of the trained weights does not match the weights it was trained from"_s.arg(
                    entry.name));
        if (entry.name.contains(u'#'))
            return fail(
                u"tensor \"%1\": a name with '#' cannot be sent as an update; use the fp32 encoding"_s.arg(
                    entry.name));
        if (entry.dtype != DType::F32) {
            if (auto s = out.add(entry.name, entry.dtype, entry.shape, trained.data(*mine)); !s)
                return fail(s.error());
            continue;
        }
        std::vector<float>
            carried; // a copy: the residual comes from a file, which need not align its tensors
        if (useResidual) {
            const TensorEntry* r = residual->find(entry.name);
            if (!r || r->dtype != DType::F32 || r->shape != entry.shape)
                return fail(u"the kept residual does not match tensor \"%1\" of the model"_s.arg(entry.name));
            carried = alignedValues<float>(*residual, *r);
        }
        const std::vector<float> update =
            updateOf(trained.values<float>(*mine), base.values<float>(entry), carried);
        std::vector<float> sent(update.size(), 0.0f); // what the coordinator will rebuild
        const qint64 n = qint64(update.size());

        switch (spec.encoding) {
        case UploadSpec::Encoding::Fp16: {
            std::vector<std::uint16_t> halves(update.size());
            for (qint64 i = 0; i < n; ++i) {
                // Beyond the largest half: sent as the largest, the rest carried as residual.
                halves[i] = Half::fromFloat(std::clamp(update[i], -65504.0f, 65504.0f));
                sent[i] = Half::toFloat(halves[i]);
            }
            if (auto s = out.addValues<std::uint16_t>(entry.name, DType::F16, entry.shape, halves); !s)
                return fail(s.error());
            break;
        }
        case UploadSpec::Encoding::Int8: {
            auto q = addInt8(out, entry.name, entry.name, entry.shape, update);
            if (!q)
                return fail(q.error());
            for (qint64 i = 0; i < n; ++i)
                sent[i] = (*q)[size_t(i)];
            break;
        }
        case UploadSpec::Encoding::TopK: {
            if (n > std::numeric_limits<qint32>::max()) // positions are int32
                return fail(u"tensor \"%1\" has too many values for the topk encoding; use int8"_s.arg(entry.name));
            const qint64 k =
                n == 0 ? 0 : std::clamp<qint64>(qint64(std::ceil(spec.density * double(n))), 1, n);
            std::vector<qint32> order(update.size());
            std::iota(order.begin(), order.end(), 0);
            // The k largest magnitudes (ties to the lower position, so the choice is the same everywhere) ...
            const auto larger = [&](qint32 a, qint32 b) {
                const float x = std::fabs(update[a]), y = std::fabs(update[b]);
                return x > y || (x == y && a < b);
            };
            std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
            order.resize(size_t(k));
            std::sort(order.begin(), order.end()); // ... sent in order of position
            std::vector<float> values(static_cast<size_t>(k));
            for (qint64 j = 0; j < k; ++j)
                values[j] = update[order[j]];
            std::vector<qint32> gaps(static_cast<size_t>(k));
            for (qint64 j = 0; j < k; ++j)
                gaps[j] = j == 0 ? order[0] : order[j] - order[j - 1];
            if (auto s = out.addValues<qint32>(indexName(entry.name), DType::I32, {k}, gaps); !s)
                return fail(s.error());
            auto q = addInt8(out, valueName(entry.name), entry.name, {k}, values);
            if (!q)
                return fail(q.error());
            for (qint64 j = 0; j < k; ++j)
                sent[order[j]] = (*q)[size_t(j)];
            break;
        }
        case UploadSpec::Encoding::Fp32:
            break;
        }
        if (spec.errorFeedback) {
            std::vector<float> rest(update.size());
            for (qint64 i = 0; i < n; ++i)
                rest[i] = update[i] - sent[i];
            if (auto s = left.addValues<float>(entry.name, DType::F32, entry.shape, rest); !s)
                return fail(s.error());
        }
    }
    if (trained.size() != base.size())
        return fail(u"the trained weights hold %1 tensors where the weights they were trained from hold %2"_s
                        .arg(trained.size())
                        .arg(base.size()));
    out.metadata() = trained.metadata();
    out.setMetadata(kEncodingKey, spec.encodingName());
    if (residual)
        *residual = std::move(left);
    return out;
}

Result<UploadSpec::Encoding> encodingOf(const TensorBundle& upload)
{
    const auto named = upload.metadata().constFind(kEncodingKey);
    if (named == upload.metadata().cend())
        return UploadSpec::Encoding::Fp32;
    const qsizetype index = UploadSpec::encodingNames().indexOf(*named);
    if (index < 0)
        return fail(u"the result's %1 is \"%2\", which this coordinator does not know (it knows %3)"_s.arg(
            kEncodingKey, named->left(40), UploadSpec::encodingNames().join(u", "_s)));
    return UploadSpec::Encoding(index);
}

Result<TensorBundle> decode(const TensorBundle& upload, const TensorBundle& base)
{
    auto encoding = encodingOf(upload);
    if (!encoding)
        return fail(encoding.error());
    if (*encoding == UploadSpec::Encoding::Fp32)
        return upload;

    QSet<QString> expected; // the tensors the layout asks for; anything more is refused
    const auto need = [&](const QString& name, DType dtype,
                          const QList<qint64>& shape) -> Result<const TensorEntry*> {
        const TensorEntry* entry = upload.find(name);
        if (!entry)
            return fail(u"the result lacks tensor \"%1\""_s.arg(name));
        if (entry->dtype != dtype || entry->shape != shape)
            return fail(u"tensor \"%1\" is %2 %3 where the %4 encoding asks for %5 %6"_s.arg(
                name, dtypeName(entry->dtype), shapeToString(entry->shape),
                UploadSpec::encodingNames().at(int(*encoding)), dtypeName(dtype), shapeToString(shape)));
        expected.insert(name);
        return entry;
    };

    // The rebuilt weights start as the base: one copy of its buffer (on the first write), the update added in
    // place, and the tensors that are not F32 taken whole from the upload.
    TensorBundle out = base;
    for (const TensorEntry& entry : out.entries()) {
        if (entry.dtype != DType::F32) {
            auto full = need(entry.name, entry.dtype, entry.shape);
            if (!full)
                return fail(full.error());
            if (entry.byteSize > 0)
                std::memcpy(out.mutableData(entry), upload.data(**full).data(), size_t(entry.byteSize));
            continue;
        }
        float* target = out.mutableValues<float>(entry).data();
        const qint64 n = entry.elementCount();

        switch (*encoding) {
        case UploadSpec::Encoding::Fp16: {
            auto halves = need(entry.name, DType::F16, entry.shape);
            if (!halves)
                return fail(halves.error());
            const std::vector<std::uint16_t> h = alignedValues<std::uint16_t>(upload, **halves);
            for (qint64 i = 0; i < n; ++i)
                target[i] += Half::toFloat(h[i]);
            break;
        }
        case UploadSpec::Encoding::Int8: {
            auto values = need(entry.name, DType::I8, entry.shape);
            if (!values)
                return fail(values.error());
            auto scales = need(scaleName(entry.name), DType::F32, {chunksOf(n)});
            if (!scales)
                return fail(scales.error());
            const std::vector<qint8> q = alignedValues<qint8>(upload, **values);
            const std::vector<float> s = alignedValues<float>(upload, **scales);
            if (auto bad = checkScales(s, (*scales)->name); !bad)
                return fail(bad.error());
            for (qint64 c = 0; c < qint64(s.size()); ++c) {
                const float scale = s[size_t(c)];
                for (qint64 i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i)
                    target[i] += float(q[size_t(i)]) * scale;
            }
            break;
        }
        case UploadSpec::Encoding::TopK: {
            // Its length k is read from the file, then bounded by the tensor's size.
            const TensorEntry* index = upload.find(indexName(entry.name));
            if (!index)
                return fail(u"the result lacks tensor \"%1\""_s.arg(indexName(entry.name)));
            const qint64 k = index->shape.size() == 1 ? index->shape.front() : -1;
            if (k < 0 || k > n)
                return fail(u"tensor \"%1\" must list between 0 and %2 positions, shape [k]; it is %3"_s.arg(
                    index->name, QString::number(n), shapeToString(index->shape)));
            auto positions = need(index->name, DType::I32, {k});
            if (!positions)
                return fail(positions.error());
            auto values = need(valueName(entry.name), DType::I8, {k});
            if (!values)
                return fail(values.error());
            auto scales = need(scaleName(entry.name), DType::F32, {chunksOf(k)});
            if (!scales)
                return fail(scales.error());
            const std::vector<qint32> gaps = alignedValues<qint32>(upload, **positions);
            const std::vector<qint8> q = alignedValues<qint8>(upload, **values);
            const std::vector<float> s = alignedValues<float>(upload, **scales);
            if (auto bad = checkScales(s, (*scales)->name); !bad)
                return fail(bad.error());
            qint64 at = -1;
            for (qint64 j = 0; j < k; ++j) {
                const qint64 gap = gaps[j];
                const qint64 next = j == 0 ? gap : at + gap;
                if (gap < (j == 0 ? 0 : 1) || next >= n)
                    return fail(
                        u"tensor \"%1\": position %2 lies outside its tensor of %3 values or out of order"_s
                            .arg(index->name)
                            .arg(j)
                            .arg(n));
                at = next;
                target[at] += dequantized(q, s, j);
            }
            break;
        }
        case UploadSpec::Encoding::Fp32:
            break;
        }
    }
    if (upload.size() != expected.size()) {
        for (const TensorEntry& entry : upload.entries())
            if (!expected.contains(entry.name))
                return fail(
                    u"the result holds tensor \"%1\", which the model and its encoding do not have"_s.arg(
                        entry.name.left(200)));
    }
    out.metadata() = upload.metadata();
    out.metadata().remove(kEncodingKey);
    return out;
}

QByteArray pack(const TensorBundle& bundle, bool zstd)
{
    QByteArray plain = SafeTensors::serialize(bundle);
    if (!zstd || plain.isEmpty())
        return plain;
    QByteArray packed(qsizetype(ZSTD_compressBound(size_t(plain.size()))), Qt::Uninitialized);
    // Level 3 (zstd's default): near its best ratio on weights at a fraction of the higher levels' time.
    const size_t written =
        ZSTD_compress(packed.data(), size_t(packed.size()), plain.constData(), size_t(plain.size()), 3);
    if (ZSTD_isError(written))
        return plain;
    packed.resize(qsizetype(written));
    return packed;
}

bool isZstd(QByteArrayView bytes)
{
    return bytes.size() >= 4 && quint8(bytes[0]) == 0x28 && quint8(bytes[1]) == 0xb5 &&
           quint8(bytes[2]) == 0x2f && quint8(bytes[3]) == 0xfd;
}

Result<TensorBundle> unpack(QByteArray bytes, qint64 maxBytes)
{
    if (isZstd(bytes)) {
        std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> context(ZSTD_createDCtx(), &ZSTD_freeDCtx);
        if (!context)
            return fail(u"cannot decompress: out of memory"_s);
        // The window a frame may ask for is bounded too: a frame cannot make the decoder allocate more than
        // this.
        ZSTD_DCtx_setParameter(context.get(), ZSTD_d_windowLogMax, 27);
        QByteArray plain;
        // A frame that states its size (ours do) is read into one allocation; the bound below still holds.
        if (const unsigned long long stated = ZSTD_getFrameContentSize(bytes.constData(), size_t(bytes.size()));
            stated != ZSTD_CONTENTSIZE_UNKNOWN && stated != ZSTD_CONTENTSIZE_ERROR &&
            stated <= static_cast<unsigned long long>(maxBytes))
            plain.reserve(qsizetype(stated));
        ZSTD_inBuffer in{bytes.constData(), size_t(bytes.size()), 0};
        std::vector<char> chunk(ZSTD_DStreamOutSize());
        size_t left = 0; // non-zero while a frame is unfinished
        for (;;) {
            ZSTD_outBuffer out{chunk.data(), chunk.size(), 0};
            left = ZSTD_decompressStream(context.get(), &out, &in);
            if (ZSTD_isError(left))
                return fail(
                    u"the zstd stream is damaged: %1"_s.arg(QString::fromLatin1(ZSTD_getErrorName(left))));
            if (qint64(plain.size()) + qint64(out.pos) > maxBytes)
                return fail(
                    u"the zstd stream decompresses to more than %1 bytes, the most this model's result may "
                    u"have"_s.arg(maxBytes));
            plain.append(chunk.data(), qsizetype(out.pos));
            if (in.pos == in.size && out.pos < out.size)
                break; // all input read and nothing more held back
        }
        if (left != 0)
            return fail(u"the zstd stream ends in the middle of a frame"_s);
        bytes = std::move(plain);
    }
    auto bundle = SafeTensors::parse(std::move(bytes));
    if (!bundle)
        return fail(bundle.error());
    return bundle;
}

} // namespace gleaner::UpdateCodec
