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
    DownloadSink(QString path, qint64 resumeFrom);
    DownloadSink(const DownloadSink&) = delete;
    DownloadSink& operator=(const DownloadSink&) = delete;

    // Decides from the answer's head where its body goes. Returns true when it goes to the file (200, 206),
    // false when the caller keeps it (an error answer); an error when the file cannot be opened or a 206 does
    // not start where the partial file ends.
    Result<bool> begin(int status, const HttpHeaderList& headers);
    Status write(const char* data, qint64 size);
    Status finish();
    bool active() const { return m_file.isOpen(); }

private:
    QFile m_file;
    qint64 m_resumeFrom;
};

} // namespace gleaner::agent
