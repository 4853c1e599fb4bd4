// Fuzzes the reading of a TorchScript archive's pickles (shared/ml/ScriptPickle), which every coordinator and worker
// runs on data.pkl and constants.pkl before libtorch unpickles them. Promises beyond "no crash, no leak, no
// undefined behaviour, no hang": a refusal names the pickle; an accepted pickle names storages of a known element
// size and a whole number of bytes.

#include "FuzzSupport.h"

#include "ml/ScriptPickle.h"

using namespace gleaner;

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray pickle = fuzz::bytes(data, size);
    const auto storages = ml::ScriptPickle::storages(pickle, QStringLiteral("fuzz.pt: data.pkl"));
    if (!storages) {
        fuzz::check(storages.error().startsWith(u"fuzz.pt: data.pkl "), "a refusal names the pickle", storages.error());
        return 0;
    }
    for (const auto& storage : *storages)
        fuzz::check(storage.elements >= 0 && (storage.itemBytes == 1 || storage.itemBytes == 2 ||
                                              storage.itemBytes == 4 || storage.itemBytes == 8 ||
                                              storage.itemBytes == 16),
                    "an accepted storage has a count and a known element size");
    return 0;
}
