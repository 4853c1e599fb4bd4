#include "http/HttpRemoteAddress.h"

#include <algorithm>

namespace gleaner::coordinator::http_detail {

namespace net = boost::asio;

RemoteAddress RemoteAddress::of(const net::ip::tcp::socket& socket)
{
    boost::system::error_code ec;
    const net::ip::address address = socket.remote_endpoint(ec).address();
    if (ec)
        return RemoteAddress{QStringLiteral("unknown"), QStringLiteral("unknown")};
    return of(address);
}

RemoteAddress RemoteAddress::of(const net::ip::address& address)
{
    if (address.is_v6() && address.to_v6().is_v4_mapped())
        return of(net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6()));
    const QString text = QString::fromStdString(address.to_string());
    if (address.is_v4())
        return RemoteAddress{text, text};
    net::ip::address_v6::bytes_type bytes = address.to_v6().to_bytes();
    std::fill(bytes.begin() + 8, bytes.end(), 0);
    return RemoteAddress{text, QString::fromStdString(net::ip::make_address_v6(bytes).to_string()) +
                                   QStringLiteral("/64")};
}

std::optional<RemoteAddress> RemoteAddress::forwardedFor(std::string_view header)
{
    const std::size_t comma = header.rfind(',');
    std::string_view last = comma == std::string_view::npos ? header : header.substr(comma + 1);
    while (!last.empty() && (last.front() == ' ' || last.front() == '\t'))
        last.remove_prefix(1);
    while (!last.empty() && (last.back() == ' ' || last.back() == '\t'))
        last.remove_suffix(1);
    boost::system::error_code ec;
    const net::ip::address address = net::ip::make_address(std::string(last), ec);
    if (ec || last.empty())
        return std::nullopt;
    return of(address);
}

} // namespace gleaner::coordinator::http_detail
