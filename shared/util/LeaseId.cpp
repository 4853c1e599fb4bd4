#include "util/LeaseId.h"

namespace gleaner {

bool LeaseId::isValid(QStringView text)
{
    if (text.size() != kLength)
        return false;
    for (const QChar c : text)
        if (!((c >= u'0' && c <= u'9') || (c >= u'a' && c <= u'f')))
            return false;
    return true;
}

Result<LeaseId> LeaseId::parse(QStringView text, QStringView what)
{
    if (isValid(text))
        return LeaseId(text.toString());
    // The text may be anything a hostile peer chose: quote a bounded, printable part of it.
    QString shown = text.left(64).toString();
    for (QChar& c : shown)
        if (!c.isPrint())
            c = u'?';
    return fail(QStringLiteral("%1 \"%2\"%3 is not a lease id (exactly %4 lowercase hex digits); refused")
                    .arg(what, shown, text.size() > 64 ? QStringLiteral("...") : QString())
                    .arg(kLength));
}

} // namespace gleaner
