// Fuzzes the NumPy reader (.npz archives and the .npy arrays in them), which reads the datasets admins bring.
// Promises beyond "no crash, no leak, no undefined behaviour, no hang": a refusal has a message; every accepted
// array's bytes match its shape; what inflates stays within the bound given.

#include "FuzzSupport.h"

#include "ml/data/NumPyReader.h"

using namespace gleaner;

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray file = fuzz::bytes(data, size);
    constexpr qint64 kBound = 1 << 20;
    const Result<TensorBundle> archive = ml::NumPy::parseNpz(file, QStringLiteral("fuzz.npz"), kBound);
    if (!archive)
        fuzz::check(!archive.error().isEmpty(), "a refused archive has a message");
    else {
        fuzz::check(archive->tensorBytes() <= kBound, "an archive inflates within its bound");
        for (const TensorEntry& entry : archive->entries())
            fuzz::check(TensorBundle::byteSizeFor(entry.dtype, entry.shape) == entry.byteSize,
                        "an accepted array's bytes match its shape", entry.name);
    }
    TensorBundle single;
    const Status array = ml::NumPy::parseNpyInto(single, QStringLiteral("a"), file, QStringLiteral("fuzz.npy"));
    if (!array)
        fuzz::check(!array.error().isEmpty() && single.entries().isEmpty(), "a refused array has a message and adds nothing");
    else
        fuzz::check(single.entries().size() == 1 &&
                        TensorBundle::byteSizeFor(single.entries()[0].dtype, single.entries()[0].shape) ==
                            single.entries()[0].byteSize,
                    "an accepted array's bytes match its shape");
    return 0;
}
