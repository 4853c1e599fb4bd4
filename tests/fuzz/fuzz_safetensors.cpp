// Fuzzes SafeTensors::parse, the reader of every weights file, upload and shard another machine sends.
// Promises checked beyond "no crash, no leak, no undefined behaviour": every accepted tensor lies inside the
// file and its bytes match its shape; whatever the reader accepts the writer can write, and reading that
// back gives the same tensors and metadata.

#include "FuzzSupport.h"

#include "format/SafeTensors.h"

using namespace gleaner;

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray file = fuzz::bytes(data, size);
    const Result<TensorBundle> bundle = SafeTensors::parse(file);
    if (!bundle) {
        fuzz::check(!bundle.error().isEmpty(), "a refused file has a message");
        return 0;
    }

    const qint64 bufferSize = bundle->buffer().size();
    for (const TensorEntry& entry : bundle->entries()) {
        fuzz::check(entry.offset >= 0 && entry.byteSize >= 0 && entry.offset <= bufferSize &&
                        entry.byteSize <= bufferSize - entry.offset,
                    "an accepted tensor lies inside the file", entry.name);
        fuzz::check(TensorBundle::byteSizeFor(entry.dtype, entry.shape) == entry.byteSize,
                    "an accepted tensor's bytes match its shape", entry.name);
        const QByteArrayView bytes = bundle->data(entry);
        fuzz::check(bytes.size() == entry.byteSize, "data() spans the tensor", entry.name);
        if (!bytes.isEmpty()) { // let AddressSanitizer see both ends
            volatile char edge = bytes.front();
            edge = bytes.back();
            (void)edge;
        }
    }

    const Status writable = SafeTensors::checkWritable(*bundle);
    fuzz::check(bool(writable), "what the reader accepts the writer can write",
                writable ? QString() : writable.error());
    const Result<TensorBundle> again = SafeTensors::parse(SafeTensors::serialize(*bundle));
    fuzz::check(bool(again), "a written file reads back", again ? QString() : again.error());
    fuzz::check(again->size() == bundle->size() && again->metadata() == bundle->metadata(),
                "reading back gives the same tensors and metadata");
    for (qsizetype i = 0; i < bundle->size(); ++i) {
        const TensorEntry& a = bundle->entries()[i];
        const TensorEntry& b = again->entries()[i];
        fuzz::check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
                        bundle->data(a) == again->data(b),
                    "reading back keeps each tensor, in order", a.name);
    }
    return 0;
}
