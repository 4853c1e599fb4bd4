// Fuzzes the coordinator's reading of "Range" and "If-None-Match" (coordinator/http/HttpRange), on which
// agents resume downloads of shards and weights. Input: 8 bytes of file size (little-endian, made
// non-negative), then the header value. Promises checked: a partial answer lies inside the file and is not
// empty, an unsatisfiable one is only given for a range the file cannot meet, and "bytes=A-B" with digits
// that fit is read as those numbers.

#include "FuzzSupport.h"

#include "http/HttpRange.h"

#include <QtEndian>

#include <algorithm>

#include <limits>

using namespace gleaner;
using namespace gleaner::coordinator;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size < 8)
        return 0;
    const qint64 fileSize =
        qint64(qFromLittleEndian<quint64>(data) & quint64(std::numeric_limits<qint64>::max()));
    // Small files are where the edge cases are; keep most sizes small.
    const qint64 sizes[] = {fileSize, fileSize % 1024};
    const QByteArray header = fuzz::bytes(data + 8, size - 8);

    for (const qint64 file : sizes) {
        const ByteRangeRequest range = parseByteRange(header, file);
        const QString detail = QStringLiteral("size %1, Range %2").arg(file).arg(QString::fromLatin1(header));
        switch (range.outcome) {
        case ByteRangeRequest::Outcome::Whole:
            break;
        case ByteRangeRequest::Outcome::Partial:
            fuzz::check(range.first >= 0 && range.first <= range.last && range.last < file,
                        "a partial answer is a non-empty window of the file", detail);
            break;
        case ByteRangeRequest::Outcome::Unsatisfiable:
            fuzz::check(header.trimmed().size() > 6, "only a range can be unsatisfiable", detail);
            break;
        }
        // A well-formed "bytes=A-B" inside the file is served exactly.
        const QByteArray spec = header.startsWith("bytes=") ? header.mid(6) : QByteArray();
        const qsizetype dash = spec.indexOf('-');
        bool firstOk = false, lastOk = false;
        const qint64 first = dash > 0 ? spec.left(dash).toLongLong(&firstOk) : 0;
        const qint64 last = dash > 0 ? spec.mid(dash + 1).toLongLong(&lastOk) : 0;
        const bool digitsOnly = dash > 0 && dash <= 18 && spec.size() - dash - 1 <= 18 &&
                                std::all_of(spec.begin(), spec.end(),
                                            [](char c) { return c == '-' || (c >= '0' && c <= '9'); }) &&
                                spec.count('-') == 1;
        if (digitsOnly && firstOk && lastOk && first <= last && last < file)
            fuzz::check(range.outcome == ByteRangeRequest::Outcome::Partial && range.first == first &&
                            range.last == last,
                        "bytes=A-B inside the file is served as A..B", detail);
    }
    (void)etagMatches(header, "\"v1\"");
    (void)etagMatches("\"v1\"", header);
    return 0;
}
