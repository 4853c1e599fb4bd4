// Fuzzes what the coordinator and the agent read of compressed transfers: UpdateCodec::unpack and decode (an
// encoded upload against the weights its lease handed out) and WeightsPatch::apply (a patch against a cached
// weights file). Promises checked beyond "no crash, no leak, no undefined behaviour": a decoded upload has
// exactly the base's tensors, names, dtypes and shapes; a patched file is no longer than the limit given.

#include "FuzzSupport.h"

#include "codec/UpdateCodec.h"
#include "codec/WeightsPatch.h"
#include "format/SafeTensors.h"

#include <vector>

using namespace gleaner;

namespace {

// The fixed base the seeds are made for (make-corpus.py): "w" F32 [300] and "n" I64 [1].
const TensorBundle& base()
{
    static const TensorBundle bundle = [] {
        TensorBundle b;
        std::vector<float> w(300);
        for (size_t i = 0; i < w.size(); ++i)
            w[i] = float(i) / 300.0f;
        (void)b.addValues<float>(QStringLiteral("w"), DType::F32, {300}, w);
        (void)b.addValues<qint64>(QStringLiteral("n"), DType::I64, {1}, std::vector<qint64>{5});
        return b;
    }();
    return bundle;
}

const QString kFromSha = QString(64, u'0');
constexpr qint64 kMaxBytes = 1 << 20;

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray input = fuzz::bytes(data, size);
    if (auto upload = UpdateCodec::unpack(input, kMaxBytes)) {
        auto decoded = UpdateCodec::decode(*upload, base());
        if (decoded && UpdateCodec::encodingOf(*upload).value() != UploadSpec::Encoding::Fp32) {
            fuzz::check(decoded->size() == base().size(), "a decoded upload has the base's tensors");
            for (const TensorEntry& entry : base().entries()) {
                const TensorEntry* got = decoded->find(entry.name);
                fuzz::check(got && got->dtype == entry.dtype && got->shape == entry.shape,
                            "a decoded tensor matches the base's", entry.name);
            }
        } else if (!decoded) {
            fuzz::check(!decoded.error().isEmpty(), "a refused upload has a message");
        }
    } else {
        fuzz::check(!upload.error().isEmpty(), "a refused file has a message");
    }

    static const QByteArray baseFile = SafeTensors::serialize(base());
    auto patched = WeightsPatch::apply(baseFile, input, kFromSha, 4096);
    if (patched)
        fuzz::check(patched->size() <= 4096, "a patched file stays within the limit");
    else
        fuzz::check(!patched.error().isEmpty(), "a refused patch has a message");
    return 0;
}
