#pragma once
// The conditional and partial parts of serving a file (RFC 9110 sections 13.1.2 and 14), kept free of Beast
// so their rules are tested as plain functions: which part of a file "Range" asks for, and whether an
// "If-None-Match" list names the file's entity tag.

#include <QByteArrayView>
#include <QtGlobal>

namespace gleaner::coordinator {

struct ByteRangeRequest
{
    enum class Outcome
    {
        Whole,         // no Range, or one we do not serve (another unit, several ranges, bad syntax): 200
        Partial,       // 206 with bytes first..last
        Unsatisfiable, // 416 with "Content-Range: bytes */size"
    };
    Outcome outcome = Outcome::Whole;
    qint64 first = 0; // inclusive
    qint64 last = -1; // inclusive
};

// `header` is the value of "Range" (empty when absent), `size` the file's length. Multi-range requests are
// answered with the whole file, as RFC 9110 allows: agents ask for one range to resume a download.
ByteRangeRequest parseByteRange(QByteArrayView header, qint64 size);

// Whether an If-None-Match value ("*" or a list of entity tags, weak or strong) matches `quotedEtag`
// ("\"abc\""). If-None-Match uses the weak comparison: W/"abc" matches "abc".
bool etagMatches(QByteArrayView ifNoneMatch, QByteArrayView quotedEtag);

} // namespace gleaner::coordinator
