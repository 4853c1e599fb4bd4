#pragma once
// Errors are values at Gleaner's boundaries: a parser or loader returns Result<T>, which holds either the
// value or a message a person can act on ("shape [3, 4] holds 12 F32 values = 48 bytes, but the offsets
// span 40"). No exceptions cross a library boundary.

#include <QString>
#include <QtGlobal>

#include <optional>
#include <utility>

namespace gleaner {

struct Error
{
    QString message;
};

// Builds the failure of any Result: `return fail(u"..."_s);` converts to Result<T> for every T.
inline Error fail(QString message)
{
    return Error{std::move(message)};
}

template <typename T> class [[nodiscard]] Result
{
public:
    Result(T value) : m_value(std::move(value)) {}
    Result(Error error) : m_error(std::move(error.message)) {}

    bool ok() const { return m_value.has_value(); }
    explicit operator bool() const { return ok(); }

    // Reading the value of a failed result is a programming error, caught in debug builds.
    const T& value() const& { return (Q_ASSERT(ok()), *m_value); }
    T& value() & { return (Q_ASSERT(ok()), *m_value); }
    T&& value() && { return (Q_ASSERT(ok()), std::move(*m_value)); }
    const T* operator->() const { return &value(); }
    T* operator->() { return &value(); }
    const T& operator*() const& { return value(); }
    T& operator*() & { return value(); }

    const QString& error() const { return m_error; }

    // Prefixes the message with where it happened: result.context(u"job.json"_s) gives "job.json: ...".
    Result context(const QString& where) &&
    {
        if (!ok())
            m_error = where + QStringLiteral(": ") + m_error;
        return std::move(*this);
    }

private:
    std::optional<T> m_value;
    QString m_error;
};

template <> class [[nodiscard]] Result<void>
{
public:
    Result() = default;
    Result(Error error) : m_failed(true), m_error(std::move(error.message)) {}

    bool ok() const { return !m_failed; }
    explicit operator bool() const { return ok(); }
    const QString& error() const { return m_error; }

    Result context(const QString& where) &&
    {
        if (m_failed)
            m_error = where + QStringLiteral(": ") + m_error;
        return std::move(*this);
    }

private:
    bool m_failed = false;
    QString m_error;
};

using Status = Result<void>;

} // namespace gleaner
