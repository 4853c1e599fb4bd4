#include "FakeTransport.h"

#include "net/DownloadSink.h"

#include <QTest>

namespace gleaner::agent::test {

using Failure = TransportResponse::Failure;

TransportResponse FakeTransport::perform(const TransportRequest& request, const ProgressCallback& progress)
{
    m_requests.append(request);
    Handler handler;
    if (!m_script.empty()) {
        handler = std::move(m_script.front());
        m_script.pop_front();
    } else if (m_fallback) {
        handler = m_fallback;
    } else {
        QTest::qFail(qPrintable(QStringLiteral("unscripted request %1 %2")
                                    .arg(QString::fromLatin1(request.method), request.url)),
                     __FILE__, __LINE__);
        return failure(Failure::Protocol, QStringLiteral("unscripted request"))(request, progress);
    }
    return handler(request, progress);
}

void FakeTransport::pushTimes(int times, const Handler& handler)
{
    for (int i = 0; i < times; ++i)
        push(handler);
}

FakeTransport::Handler FakeTransport::answer(int status, QByteArray body, HttpHeaderList headers)
{
    return [=](const TransportRequest& request, const ProgressCallback&) {
        TransportResponse r;
        r.status = status;
        r.headers = headers;
        r.body = body;
        r.bytesReceived = body.size();
        // A download's file is left alone by an error answer, as CurlTransport does.
        if (!request.downloadFile.isEmpty() && (status == 200 || status == 206)) {
            DownloadSink sink(request.downloadFile, request.resumeFrom, request.maxDownloadBytes);
            const Result<bool> toFile = sink.begin(status, headers);
            if (toFile && *toFile) {
                const Status written = sink.write(body.constData(), body.size());
                (void)sink.finish();
                r.body.clear();
                if (!written) {
                    r.failure = sink.oversized() ? Failure::Oversized : Failure::LocalFile;
                    r.error = written.error();
                }
            }
        }
        return r;
    };
}

FakeTransport::Handler FakeTransport::failure(Failure failure, QString message)
{
    return [=](const TransportRequest&, const ProgressCallback&) {
        TransportResponse r;
        r.failure = failure;
        r.error = message;
        return r;
    };
}

FakeTransport::Handler FakeTransport::serveFile(QByteArray content, qint64 cutAfter, bool honourRange, qint64 chunk)
{
    return [=](const TransportRequest& request, const ProgressCallback& progress) {
        TransportResponse r;
        const qint64 size = content.size();
        const bool partial = honourRange && request.resumeFrom > 0;
        if (partial && request.resumeFrom >= size) {
            r.status = 416;
            r.headers.emplaceBack("Content-Range", QByteArray("bytes */" + QByteArray::number(size)));
            r.body = R"({"error": "the range is outside the file"})";
            return r;
        }
        const qint64 from = partial ? request.resumeFrom : 0;
        r.status = partial ? 206 : 200;
        if (partial)
            r.headers.emplaceBack("Content-Range", QByteArray("bytes " + QByteArray::number(from) + '-'
                                                              + QByteArray::number(size - 1) + '/'
                                                              + QByteArray::number(size)));
        DownloadSink sink(request.downloadFile, request.resumeFrom, request.maxDownloadBytes);
        const Result<bool> toFile = sink.begin(r.status, r.headers);
        if (!toFile || !*toFile) {
            r = TransportResponse{};
            r.failure = sink.oversized() ? Failure::Oversized : Failure::LocalFile;
            r.error = toFile ? QStringLiteral("not a download") : toFile.error();
            return r;
        }
        const QByteArray body = content.mid(from);
        const qint64 end = cutAfter >= 0 ? qMin<qint64>(cutAfter, body.size()) : body.size();
        for (qint64 at = 0; at < end; at += chunk) {
            const qint64 n = qMin(chunk, end - at);
            // As CurlTransport does: a write the sink refuses ends the exchange there.
            if (const Status written = sink.write(body.constData() + at, n); !written) {
                const qint64 received = r.bytesReceived;
                r = TransportResponse{};
                r.failure = sink.oversized() ? Failure::Oversized : Failure::LocalFile;
                r.error = written.error();
                r.bytesReceived = received;
                return r;
            }
            r.bytesReceived += n;
            if (progress && !progress(TransferProgress{r.bytesReceived, body.size(), 0, 0})) {
                (void)sink.finish();
                r = TransportResponse{};
                r.failure = Failure::Cancelled;
                r.error = QStringLiteral("the transfer was cancelled");
                return r;
            }
        }
        (void)sink.finish();
        if (end < body.size()) {
            const qint64 received = r.bytesReceived;
            r = TransportResponse{};
            r.failure = Failure::Network;
            r.error = QStringLiteral("Transferred a partial file (transfer closed with %1 bytes remaining to read)")
                          .arg(body.size() - end);
            r.bytesReceived = received;
        }
        return r;
    };
}

} // namespace gleaner::agent::test
