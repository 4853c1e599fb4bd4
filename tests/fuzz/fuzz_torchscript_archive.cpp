// Fuzzes the first look at a TorchScript archive (shared/ml/ScriptArchive), the torch-free check every coordinator
// and worker runs on a model file before libtorch reads it. Promises beyond "no crash, no leak, no undefined
// behaviour, no hang": a refusal has a message that names the file; an accepted archive has one folder and a
// program under code/.

#include "FuzzSupport.h"

#include "ml/ScriptArchive.h"

using namespace gleaner;

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray file = fuzz::bytes(data, size);
    const auto summary = ml::ScriptArchive::inspectBytes(file, QStringLiteral("fuzz.pt"));
    if (!summary)
        fuzz::check(summary.error().startsWith(u"fuzz.pt"), "a refusal names the file", summary.error());
    else
        fuzz::check(!summary->folder.isEmpty() && !summary->sourceFiles.isEmpty() && summary->bytes == file.size(),
                    "an accepted archive has a folder and a program");
    return 0;
}
