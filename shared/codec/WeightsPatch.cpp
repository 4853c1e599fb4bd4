#include "codec/WeightsPatch.h"

#include "codec/UpdateCodec.h"
#include "format/SafeTensors.h"

#include <QtEndian>

#include <cstring>
#include <limits>
#include <vector>

using namespace Qt::StringLiterals;

namespace gleaner::WeightsPatch {
namespace {

// Where a safetensors file's data starts: 8 + the header's length, within the file.
Result<qint64> dataStart(QByteArrayView file, const char* which)
{
    if (file.size() < 8)
        return fail(u"the %1 file is too short to be a weights file"_s.arg(QLatin1String(which)));
    const quint64 headerBytes = qFromLittleEndian<quint64>(file.data());
    if (headerBytes > quint64(SafeTensors::kMaxHeaderBytes) || qint64(headerBytes) > file.size() - 8)
        return fail(u"the %1 file's header length is impossible"_s.arg(QLatin1String(which)));
    return qint64(headerBytes) + 8;
}

quint32 wordAt(const char* data, qint64 word)
{
    quint32 value;
    std::memcpy(&value, data + word * 4, 4);
    return value;
}

} // namespace

Result<QByteArray> make(QByteArrayView from, QByteArrayView to, const QString& fromSha, const QString& toSha)
{
    auto fromStart = dataStart(from, "earlier");
    auto toStart = dataStart(to, "later");
    if (!fromStart || !toStart)
        return fail(fromStart ? toStart.error() : fromStart.error());
    const qint64 length = to.size() - *toStart;
    if (from.size() - *fromStart != length)
        return fail(u"the two weights files hold data of different lengths: not the same model"_s);
    if (length / 4 > qint64(std::numeric_limits<qint32>::max()))
        return fail(u"the weights are too large for a patch"_s);
    const char* a = from.data() + *fromStart;
    const char* b = to.data() + *toStart;
    std::vector<qint32> gaps;
    std::vector<quint32> words;
    qint64 last = -1;
    for (qint64 w = 0; w < length / 4; ++w) {
        const quint32 value = wordAt(b, w);
        if (value == wordAt(a, w))
            continue;
        gaps.push_back(qint32(last < 0 ? w : w - last));
        words.push_back(value ^
                        wordAt(a, w)); // a small change leaves sign, exponent and high bits: zeros to zstd
        last = w;
    }
    TensorBundle patch;
    const qint64 m = qint64(gaps.size());
    const qint64 tail = length % 4;
    if (auto s = patch.add(u"header"_s, DType::U8, {*toStart}, to.first(*toStart)); !s)
        return fail(s.error());
    if (auto s = patch.addValues<qint32>(u"index"_s, DType::I32, {m}, gaps); !s)
        return fail(s.error());
    if (auto s = patch.addValues<quint32>(u"words"_s, DType::U32, {m}, words); !s)
        return fail(s.error());
    if (auto s = patch.add(u"tail"_s, DType::U8, {tail}, to.last(tail)); !s)
        return fail(s.error());
    patch.setMetadata(u"gleaner.patch_from"_s, fromSha);
    patch.setMetadata(u"gleaner.patch_to"_s, toSha);
    return UpdateCodec::pack(patch, true);
}

Result<QByteArray> apply(QByteArrayView from, const QByteArray& patchBytes, const QString& fromSha,
                         qint64 maxBytes)
{
    auto fromStart = dataStart(from, "earlier");
    if (!fromStart)
        return fail(fromStart.error());
    const qint64 length = from.size() - *fromStart;
    // The patch can hold at most the whole later file twice over (every word changed, with its index).
    auto patch = UpdateCodec::unpack(patchBytes, 2 * maxBytes + 65536);
    if (!patch)
        return fail(u"the patch is damaged: %1"_s.arg(patch.error()));
    if (patch->metadata().value(u"gleaner.patch_from"_s) != fromSha)
        return fail(u"the patch was made from another file than %1"_s.arg(fromSha));
    const TensorEntry* header = patch->find(u"header");
    const TensorEntry* index = patch->find(u"index");
    const TensorEntry* words = patch->find(u"words");
    const TensorEntry* tail = patch->find(u"tail");
    if (patch->size() != 4 || !header || !index || !words || !tail || header->dtype != DType::U8 ||
        index->dtype != DType::I32 || words->dtype != DType::U32 || tail->dtype != DType::U8 ||
        header->shape.size() != 1 || index->shape.size() != 1 || index->shape != words->shape ||
        tail->shape != QList<qint64>{length % 4})
        return fail(u"the patch does not have the layout of a weights patch"_s);
    const QByteArrayView head = patch->data(*header);
    auto toStart = dataStart(head, "patched");
    if (!toStart || *toStart != head.size())
        return fail(u"the patch's header is not a weights file's header"_s);
    if (head.size() + length > maxBytes)
        return fail(
            u"the patched file would have %1 bytes, more than the %2 expected"_s.arg(head.size() + length)
                .arg(maxBytes));

    QByteArray out;
    out.reserve(head.size() + length);
    out.append(head.data(), head.size());
    out.append(from.data() + *fromStart, length);
    char* data = out.data() + head.size();
    const qint64 m = index->shape.front();
    const QByteArrayView gaps = patch->data(*index);
    const QByteArrayView values = patch->data(*words);
    qint64 at = -1;
    for (qint64 j = 0; j < m; ++j) {
        qint32 gap;
        std::memcpy(&gap, gaps.data() + j * 4, 4);
        const qint64 next = j == 0 ? gap : at + gap;
        if (gap < (j == 0 ? 0 : 1) || next >= length / 4)
            return fail(u"the patch's word %1 lies outside the weights or out of order"_s.arg(j));
        quint32 word, change;
        std::memcpy(&word, data + next * 4, 4);
        std::memcpy(&change, values.data() + j * 4, 4);
        word ^= change;
        std::memcpy(data + next * 4, &word, 4);
        at = next;
    }
    const QByteArrayView rest = patch->data(*tail);
    if (!rest.isEmpty())
        std::memcpy(data + (length - rest.size()), rest.data(), size_t(rest.size()));
    return out;
}

} // namespace gleaner::WeightsPatch
