#pragma once
// Internal to coordinator/http (includes Beast): a Beast body that sends one window of an open file. Beast's
// file_body sends from the file's position to its end in 4 KiB reads; a Range answer needs a window, and
// multi-megabyte shards and weights want larger reads.

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/file.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

namespace gleaner::coordinator::http_detail {

struct FileRangeBody
{
    struct value_type
    {
        boost::beast::file file; // open for reading
        std::uint64_t offset = 0;
        std::uint64_t length = 0;
    };

    static std::uint64_t size(const value_type& body) { return body.length; }

    class writer
    {
    public:
        using const_buffers_type = boost::asio::const_buffer;

        template <bool isRequest, class Fields>
        writer(boost::beast::http::header<isRequest, Fields>&, value_type& body)
            : m_body(body), m_remaining(body.length)
        {
        }

        void init(boost::beast::error_code& ec) { m_body.file.seek(m_body.offset, ec); }

        boost::optional<std::pair<const_buffers_type, bool>> get(boost::beast::error_code& ec)
        {
            ec = {};
            if (m_remaining == 0)
                return boost::none;
            if (!m_buffer)
                m_buffer = std::make_unique<char[]>(kChunkBytes);
            const auto want = std::size_t(std::min<std::uint64_t>(m_remaining, kChunkBytes));
            const std::size_t got = m_body.file.read(m_buffer.get(), want, ec);
            if (ec)
                return boost::none;
            if (got == 0) {
                // The file shrank after Content-Length was sent: the message cannot be completed honestly, so
                // the connection must fail rather than pad.
                ec = boost::system::errc::make_error_code(boost::system::errc::io_error);
                return boost::none;
            }
            m_remaining -= got;
            return std::make_pair(const_buffers_type(m_buffer.get(), got), m_remaining > 0);
        }

    private:
        static constexpr std::size_t kChunkBytes = 64 * 1024;
        value_type& m_body;
        std::uint64_t m_remaining;
        std::unique_ptr<char[]> m_buffer;
    };
};

} // namespace gleaner::coordinator::http_detail
