// Fuzzes what an agent reads of a task manifest once its signature has verified (agent/runner/TaskManifest
// checkManifest): the input is the manifest's JSON text, which this target signs with the fixed coordinator
// key first, so every input gets past the signature to the parser. A coordinator is trusted to sign, not to
// be bug-free: a manifest it wrote wrongly must still be refused with a message, never crash the agent.
// Promises checked: an accepted manifest holds what the agent relies on (three files in the order model,
// weights, shard with 64 lowercase hex digits each, counts in range, the expected lease); and a manifest
// whose bytes differ from the signed ones by one byte is refused.

#include "FuzzKeys.h"
#include "FuzzSupport.h"

#include "crypto/SignedEnvelope.h"

using namespace gleaner;

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    fuzz::coordinatorKey();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray manifest = fuzz::bytes(data, size);
    const SignedEnvelope envelope = SignedEnvelope::sign(fuzz::coordinatorKey(), manifest);
    static const VerifyKey pinned = fuzz::coordinatorKey().publicKey();
    const Result<agent::TaskManifest> task =
        agent::checkManifest(pinned, manifest, envelope.signature, fuzz::expectation());
    if (!task) {
        fuzz::check(!task.error().isEmpty(), "a refused manifest has a message");
        return 0;
    }

    fuzz::check(task->leaseId == fuzz::expectation().leaseId,
                "an accepted manifest is for the lease asked about");
    fuzz::check(task->jobId >= 1 && task->workunitId >= 1 && task->epoch >= 1 && task->shard >= 0 &&
                    task->samples >= 1 && task->baseVersion >= 0 && task->issuedMs >= 0 &&
                    task->deadlineMs >= 0,
                "an accepted manifest's counts are in range");
    fuzz::check(task->files.size() == 3 && task->files[0].role == u"model" &&
                    task->files[1].role == u"weights" && task->files[2].role == u"shard",
                "an accepted manifest lists model, weights and shard");
    fuzz::check(task->nonce.size() == 32, "an accepted manifest has a 32-digit nonce", task->nonce);
    for (const agent::ManifestFile& file : task->files) {
        fuzz::check(file.size >= 0 && file.sha256.size() == 64, "a file has a size and a SHA-256", file.role);
        for (const QChar c : file.sha256)
            fuzz::check((c >= u'0' && c <= u'9') || (c >= u'a' && c <= u'f'), "the SHA-256 is lowercase hex",
                        file.sha256);
    }

    // The signature covers every byte: flip one (chosen by the input) and the manifest must be refused.
    QByteArray altered = manifest;
    const qsizetype at = qsizetype(quint8(manifest.back())) % manifest.size();
    altered[at] = char(altered[at] ^ 0x01);
    fuzz::check(!agent::checkManifest(pinned, altered, envelope.signature, fuzz::expectation()),
                "a manifest altered after signing is refused");
    return 0;
}
