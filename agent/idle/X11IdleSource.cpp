#include "X11IdleSource.h"

#include "IdleLogging.h"

#include <QFile>

#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <xcb/screensaver.h>
#include <xcb/xcb.h>
#include <xcb/xcbext.h> // xcb_poll_for_reply

#include <cstdlib>
#include <utility>

namespace gleaner::agent {

namespace {

constexpr int kReplyTimeoutMs = 200;
constexpr qint64 kRestAfterTimeoutMs = 30'000;

// The XCB entry points the source uses, resolved once from the shared libraries.
struct Xcb
{
    decltype(&xcb_connect) connect = nullptr;
    decltype(&xcb_connection_has_error) hasError = nullptr;
    decltype(&xcb_disconnect) disconnect = nullptr;
    decltype(&xcb_get_setup) getSetup = nullptr;
    decltype(&xcb_setup_roots_iterator) rootsIterator = nullptr;
    decltype(&xcb_screen_next) screenNext = nullptr;
    decltype(&xcb_get_extension_data) extensionData = nullptr;
    decltype(&xcb_flush) flush = nullptr;
    decltype(&xcb_poll_for_reply) pollForReply = nullptr;
    decltype(&xcb_get_file_descriptor) fileDescriptor = nullptr;
    decltype(&xcb_screensaver_query_info) queryInfo = nullptr;
    xcb_extension_t* screensaverExtension = nullptr;
    QString error; // why the libraries could not be used; empty when they can
};

const Xcb& xcb()
{
    static const Xcb api = [] {
        Xcb x;
        // Never closed: XCB keeps no state outside its connections, and unloading it buys nothing.
        void* core = dlopen("libxcb.so.1", RTLD_NOW | RTLD_LOCAL);
        void* saver = core ? dlopen("libxcb-screensaver.so.0", RTLD_NOW | RTLD_LOCAL) : nullptr;
        if (!core || !saver) {
            x.error =
                QStringLiteral("%1 could not be loaded (%2); install libxcb1 and libxcb-screensaver0 to read "
                               "the idle time from the X server")
                    .arg(core ? u"libxcb-screensaver.so.0" : u"libxcb.so.1", QString::fromUtf8(dlerror()));
            return x;
        }
        const auto resolve = [](void* lib, auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
            return fn != nullptr;
        };
        const bool ok =
            resolve(core, x.connect, "xcb_connect") &&
            resolve(core, x.hasError, "xcb_connection_has_error") &&
            resolve(core, x.disconnect, "xcb_disconnect") && resolve(core, x.getSetup, "xcb_get_setup") &&
            resolve(core, x.rootsIterator, "xcb_setup_roots_iterator") &&
            resolve(core, x.screenNext, "xcb_screen_next") &&
            resolve(core, x.extensionData, "xcb_get_extension_data") && resolve(core, x.flush, "xcb_flush") &&
            resolve(core, x.pollForReply, "xcb_poll_for_reply") &&
            resolve(core, x.fileDescriptor, "xcb_get_file_descriptor") &&
            resolve(saver, x.queryInfo, "xcb_screensaver_query_info");
        x.screensaverExtension = static_cast<xcb_extension_t*>(dlsym(saver, "xcb_screensaver_id"));
        if (!ok || !x.screensaverExtension)
            x.error = QStringLiteral(
                "the XCB libraries lack a function Gleaner needs; the idle time cannot be read "
                "from the X server");
        return x;
    }();
    return api;
}

xcb_connection_t* asXcb(void* connection)
{
    return static_cast<xcb_connection_t*>(connection);
}

// Writing to an X server that has just died raises SIGPIPE, whose default action ends the process. The signal
// is blocked in this thread while XCB writes and, if it came, taken back before unblocking, so it never
// reaches the process's disposition (which a daemon may have left at the default).
class SigPipeBlocker
{
public:
    SigPipeBlocker()
    {
        sigemptyset(&m_pipe);
        sigaddset(&m_pipe, SIGPIPE);
        sigset_t pending;
        sigpending(&pending);
        m_wasPending = sigismember(&pending, SIGPIPE) == 1;
        pthread_sigmask(SIG_BLOCK, &m_pipe, &m_previous);
    }
    ~SigPipeBlocker()
    {
        sigset_t pending;
        sigpending(&pending);
        if (!m_wasPending && sigismember(&pending, SIGPIPE) == 1) {
            const timespec zero{};
            sigtimedwait(&m_pipe, nullptr, &zero);
        }
        pthread_sigmask(SIG_SETMASK, &m_previous, nullptr);
    }
    SigPipeBlocker(const SigPipeBlocker&) = delete;
    SigPipeBlocker& operator=(const SigPipeBlocker&) = delete;

private:
    sigset_t m_pipe;
    sigset_t m_previous;
    bool m_wasPending = false;
};

bool underWayland()
{
    return !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") ||
           qEnvironmentVariable("XDG_SESSION_TYPE").compare(u"wayland", Qt::CaseInsensitive) == 0;
}

} // namespace

X11IdleSource::X11IdleSource(QString display) : m_display(std::move(display)) {}

X11IdleSource::~X11IdleSource()
{
    if (m_connection)
        xcb().disconnect(asXcb(m_connection));
}

void X11IdleSource::disconnect(const QString& reason)
{
    if (m_connection) {
        SigPipeBlocker blocker;
        xcb().disconnect(asXcb(m_connection));
        m_connection = nullptr;
        qCInfo(lcIdle).noquote() << reason;
    }
    m_reason = reason;
}

bool X11IdleSource::connect()
{
    const Xcb& api = xcb();
    if (!api.error.isEmpty()) {
        m_reason = api.error;
        return false;
    }
    if (!m_rest.hasExpired())
        return false;
    const QString display = m_display.isEmpty() ? qEnvironmentVariable("DISPLAY") : m_display;
    if (display.isEmpty()) {
        m_reason =
            QStringLiteral("DISPLAY is not set, so there is no X server to ask for the idle time; start the "
                           "agent inside the desktop session or set DISPLAY (e.g. DISPLAY=:0)");
        return false;
    }
    SigPipeBlocker blocker;
    int screen = 0;
    xcb_connection_t* c = api.connect(QFile::encodeName(display).constData(), &screen);
    if (const int error = api.hasError(c)) {
        api.disconnect(c); // XCB returns an error object, which must be freed too
        const QString reason =
            QStringLiteral("cannot connect to the X server %1 (XCB error %2); is it running, and "
                           "may this user connect to it (XAUTHORITY)?")
                .arg(display)
                .arg(error);
        if (reason != m_reason) // once per change: a machine without X would repeat it on every sample
            qCDebug(lcIdle).noquote() << reason;
        m_reason = reason;
        return false;
    }
    const xcb_query_extension_reply_t* extension = api.extensionData(c, api.screensaverExtension);
    if (!extension || !extension->present) {
        api.disconnect(c);
        m_reason =
            QStringLiteral("the X server %1 lacks the MIT-SCREEN-SAVER extension, so it cannot tell the idle "
                           "time; choose another idle source")
                .arg(display);
        m_rest.setRemainingTime(kRestAfterTimeoutMs);
        return false;
    }
    xcb_screen_iterator_t it = api.rootsIterator(api.getSetup(c));
    for (int i = 0; i < screen && it.rem > 0; ++i)
        api.screenNext(&it);
    if (it.rem <= 0 || !it.data) {
        api.disconnect(c);
        m_reason = QStringLiteral("the X server %1 has no screen %2").arg(display).arg(screen);
        return false;
    }
    m_root = it.data->root;
    m_connection = c;
    qCInfo(lcIdle).noquote() << "connected to X server" << display;
    return true;
}

IdleReading X11IdleSource::readIdle()
{
    if (!m_connection && !connect())
        return {};
    const Xcb& api = xcb();
    xcb_connection_t* c = asXcb(m_connection);
    const QString display = m_display.isEmpty() ? qEnvironmentVariable("DISPLAY") : m_display;

    void* reply = nullptr;
    xcb_generic_error_t* error = nullptr;
    bool answered = false;
    {
        SigPipeBlocker blocker;
        const xcb_screensaver_query_info_cookie_t cookie = api.queryInfo(c, m_root);
        api.flush(c);
        // xcb_screensaver_query_info_reply would wait without limit; poll for the reply instead.
        const QDeadlineTimer deadline(kReplyTimeoutMs);
        while (!(answered = api.pollForReply(c, cookie.sequence, &reply, &error) != 0)) {
            if (api.hasError(c))
                break;
            pollfd fd{api.fileDescriptor(c), POLLIN, 0};
            const qint64 left = deadline.remainingTime();
            if (left <= 0)
                break;
            ::poll(&fd, 1, static_cast<int>(left));
        }
    }
    if (api.hasError(c)) {
        std::free(reply);
        std::free(error);
        disconnect(
            QStringLiteral("the X server %1 closed the connection (it exited, or the session ended); will "
                           "reconnect when it is back")
                .arg(display));
        return {};
    }
    if (!answered) {
        disconnect(QStringLiteral("the X server %1 did not answer within %2 ms; not asked again for %3 s")
                       .arg(display)
                       .arg(kReplyTimeoutMs)
                       .arg(kRestAfterTimeoutMs / 1000));
        m_rest.setRemainingTime(kRestAfterTimeoutMs);
        return {};
    }
    if (error || !reply) {
        m_reason = QStringLiteral("the X server %1 refused the idle-time query (X error %2)")
                       .arg(display)
                       .arg(error ? error->error_code : 0);
        std::free(reply);
        std::free(error);
        return {};
    }
    IdleReading reading;
    reading.available = true;
    reading.idleMs = static_cast<const xcb_screensaver_query_info_reply_t*>(reply)->ms_since_user_input;
    reading.precise = !underWayland();
    std::free(reply);
    m_reason.clear();
    return reading;
}

} // namespace gleaner::agent
