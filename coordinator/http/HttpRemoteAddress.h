#pragma once
// Internal to coordinator/http (includes Asio): who is on the other end of a connection, as logs show it and as
// per-client limits count it.

#include <boost/asio/ip/tcp.hpp>

#include <QString>

#include <optional>
#include <string_view>

namespace gleaner::coordinator::http_detail {

struct RemoteAddress
{
    QString address; // "192.0.2.7", "2001:db8::1"; an IPv4-mapped IPv6 address as IPv4; "unknown" when unreadable
    // The IPv4 address, or the /64 an IPv6 address lies in ("2001:db8::/64"): one subscriber is usually handed a
    // whole /64 and could otherwise open each connection, or send each request, from another address.
    QString key;

    static RemoteAddress of(const boost::asio::ip::tcp::socket& socket);
    static RemoteAddress of(const boost::asio::ip::address& address);
    // The client a trusted proxy forwarded for: the last entry of an X-Forwarded-For value (the address the
    // proxy saw). nullopt when the value holds no valid address there.
    static std::optional<RemoteAddress> forwardedFor(std::string_view header);
};

} // namespace gleaner::coordinator::http_detail
