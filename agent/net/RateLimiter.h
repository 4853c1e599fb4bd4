#pragma once
// Keeps one transfer at or below a rate cap by making its caller wait. libcurl's own caps
// (CURLOPT_MAX_RECV_SPEED_LARGE) are applied only between passes of up to 100 socket reads, so a file of a few
// hundred kilobytes passes at full speed; the owner's cap must hold for small files too. Waiting inside the
// transfer's callbacks also stops reading from the socket, so TCP slows the sender down instead of a buffer
// filling up.

#include <QElapsedTimer>
#include <QtGlobal>

namespace gleaner::agent {

class RateLimiter
{
public:
    explicit RateLimiter(qint64 bytesPerSecond = 0);

    bool active() const { return m_rate > 0; }
    // How many bytes to move at most in one step, so that one wait stays short (cancellation stays prompt).
    qint64 stepBytes(qint64 room) const;
    // Counts `bytes` that just moved and waits until the transfer is back under the cap.
    void account(qint64 bytes);

private:
    qint64 m_rate;
    qint64 m_moved = 0;
    QElapsedTimer m_clock;
};

} // namespace gleaner::agent
