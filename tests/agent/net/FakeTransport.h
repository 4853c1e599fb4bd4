#pragma once
// A Transport for tests that answers from a script: each request takes the next handler, which may answer with
// any status, fail like the network does (refused, timeout, broken, TLS), or serve a file the way the
// coordinator does (Range, 206), cut short or in slow chunks. Every request is recorded for the test to check.

#include "net/Transport.h"

#include <QList>

#include <deque>
#include <functional>

namespace gleaner::agent::test {

class FakeTransport final : public Transport
{
public:
    using Handler = std::function<TransportResponse(const TransportRequest&, const ProgressCallback&)>;

    TransportResponse perform(const TransportRequest& request, const ProgressCallback& progress) override;

    // Handlers run in order, one per request; once used up, `fallback` answers (by default a test failure).
    void push(Handler handler) { m_script.push_back(std::move(handler)); }
    void pushTimes(int times, const Handler& handler);
    void setFallback(Handler handler) { m_fallback = std::move(handler); }
    const QList<TransportRequest>& requests() const { return m_requests; }
    int pending() const { return int(m_script.size()); }

    static Handler answer(int status, QByteArray body = {}, HttpHeaderList headers = {});
    static Handler failure(TransportResponse::Failure failure, QString message);
    // Serves `content` as GET /api/v1/files/... does: 206 from resumeFrom when asked, 200 otherwise (or always,
    // when `honourRange` is false). `cutAfter` >= 0 breaks the transfer after that many body bytes, as a
    // connection that dies mid-body; `chunk` is how many bytes pass between progress calls.
    static Handler serveFile(QByteArray content, qint64 cutAfter = -1, bool honourRange = true, qint64 chunk = 4096);

private:
    std::deque<Handler> m_script;
    Handler m_fallback;
    QList<TransportRequest> m_requests;
};

} // namespace gleaner::agent::test
