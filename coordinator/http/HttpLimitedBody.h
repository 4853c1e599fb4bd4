#pragma once
// Internal to coordinator/http (includes Beast): a request body that counts what it receives and refuses the
// bytes past its limit (http::error::body_limit, answered 413), whatever the head announced.
//
// Beast checks a parser's body_limit against the Content-Length once, when the head ends, and against each
// chunk's size; it does not count the bytes of a Content-Length body as they arrive. The limit therefore lives
// in the sink too: a head that slipped past the first check (a length that wrapped, a framing bug) still
// cannot write more than the limit into memory or onto the disk.

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>

#include <cstdint>

namespace gleaner::coordinator::http_detail {

template <class Inner>
struct LimitedBody
{
    struct value_type
    {
        typename Inner::value_type inner;
        std::uint64_t limit = 0; // set before the body starts (reader::init)
    };

    class reader
    {
    public:
        // Beast 1.74 builds the reader with its parser, before the limit is set: the limit is read in init().
        template <bool isRequest, class Fields>
        reader(boost::beast::http::header<isRequest, Fields>& head, value_type& body)
            : m_inner(head, body.inner), m_body(body)
        {
        }

        // When the body starts.
        void init(const boost::optional<std::uint64_t>& contentLength, boost::beast::error_code& ec)
        {
            m_limit = m_body.limit;
            m_received = 0;
            if (contentLength && *contentLength > m_limit) {
                ec = boost::beast::http::error::body_limit;
                return;
            }
            m_inner.init(contentLength, ec);
        }

        template <class ConstBufferSequence>
        std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec)
        {
            const std::size_t bytes = boost::asio::buffer_size(buffers);
            // Nothing of a write that crosses the limit is kept: the request fails as a whole.
            if (bytes > m_limit - m_received) {
                ec = boost::beast::http::error::body_limit;
                return 0;
            }
            const std::size_t taken = m_inner.put(buffers, ec);
            m_received += taken;
            return taken;
        }

        void finish(boost::beast::error_code& ec) { m_inner.finish(ec); }

        std::uint64_t received() const { return m_received; }

    private:
        typename Inner::reader m_inner;
        const value_type& m_body;
        std::uint64_t m_limit = 0;
        std::uint64_t m_received = 0;
    };
};

} // namespace gleaner::coordinator::http_detail
