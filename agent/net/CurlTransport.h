#pragma once
// The Transport of the real agent, on libcurl. One easy handle is reused for every request, so requests to the
// coordinator travel over one kept-alive connection (libcurl's connection cache lives in the handle) instead of
// paying a TLS handshake each. TLS is always verified: against the pinned coordinator certificate when one is
// given (it is then the only trust anchor, the system store is not consulted), otherwise against the system's
// certificate authorities, with the host name checked in both cases. Only https:// URLs are accepted.
//
// Synchronous and not thread-safe: one CurlTransport per thread. libcurl stays behind this header (pimpl).

#include "Transport.h"

#include <memory>

namespace gleaner::agent {

class CurlTransport final : public Transport
{
public:
    // `caCertificatePath`: PEM of the coordinator's certificate (or of the CA that signed it); empty trusts the
    // system store. A missing or unreadable file is reported by the first request, as a TLS failure.
    explicit CurlTransport(QString caCertificatePath = {}, QByteArray userAgent = "gleaner-agent");
    ~CurlTransport() override;
    CurlTransport(const CurlTransport&) = delete;
    CurlTransport& operator=(const CurlTransport&) = delete;

    TransportResponse perform(const TransportRequest& request, const ProgressCallback& progress) override;

    // Connections opened over this transport's life: a test's view of keep-alive.
    int connectionsOpened() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace gleaner::agent
