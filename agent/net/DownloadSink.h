#pragma once
// Where the body of a download goes: a 206 answer is appended to the partial file it resumes, a 200 answer
// replaces the file. CurlTransport and the tests' fake transport share it, so both follow the same resume rules
// and a test of the resume logic exercises the code that runs in production.

#include "Transport.h"

#include "Result.h"

#include <QFile>

namespace gleaner::agent {

class DownloadSink
{
public:
    // `maxBytes` >= 0: the most bytes the file may hold (TransportRequest::maxDownloadBytes); -1: no limit.
    DownloadSink(QString path, qint64 resumeFrom, qint64 maxBytes = -1);
    DownloadSink(const DownloadSink&) = delete;
    DownloadSink& operator=(const DownloadSink&) = delete;

    // Decides from the answer's head where its body goes. Returns true when it goes to the file (200, 206),
    // false when the caller keeps it (an error answer); an error when the file cannot be opened, a 206 does
    // not start where the partial file ends, or the Content-Length announces more than maxBytes allows.
    Result<bool> begin(int status, const HttpHeaderList& headers);
    // Refuses, before writing, bytes that would take the file past maxBytes, and deletes the file then.
    Status write(const char* data, qint64 size);
    Status finish();
    bool active() const { return m_file.isOpen(); }
    // The last error of begin() or write() was a body larger than maxBytes allows (the file is gone).
    bool oversized() const { return m_oversized; }

private:
    Status refuseOversized(qint64 bytes);

    QFile m_file;
    qint64 m_resumeFrom;
    qint64 m_maxBytes;
    qint64 m_position = 0; // bytes the file holds from its start: where the next write lands
    bool m_oversized = false;
};

} // namespace gleaner::agent
