// gleaner-coordinator serve: the HTTPS server in the foreground until SIGTERM or SIGINT.
#include "api/ApiHandler.h"
#include "cli/Cli.h"
#include "config/DataDirectory.h"
#include "core/Coordinator.h"
#include "http/HttpServer.h"
#include "http/OpenFileLimit.h"
#include "util/Clock.h"

#include <QCommandLineParser>
#include <QHostAddress>
#include <QTextStream>
#include <QUrl>

#include <atomic>
#include <csignal>
#include <unistd.h>
#include <ctime>

namespace gleaner::coordinator::cli {
namespace {

// Raises the open-file limit as far as the system lets an unprivileged process, and holds the server to the
// connections that fit in it: past the limit, accept() would fail with EMFILE for every client alike.
void fitConnectionsToOpenFiles(HttpServerOptions& options)
{
    QTextStream err(stderr);
    const Result<OpenFileLimit> limit = raiseOpenFileLimit();
    if (!limit) {
        err << "gleaner-coordinator: " << limit.error() << "; keeping the limit the system gave\n";
        return;
    }
    err << "gleaner-coordinator: open-file limit " << limit->soft;
    if (limit->previous != limit->soft)
        err << " (raised from " << limit->previous << ")";
    err << "\n";
    const int fit = connectionsThatFit(limit->soft, options.maxConnections);
    if (fit < options.maxConnections) {
        err << "gleaner-coordinator: the open-file limit " << limit->soft << " leaves room for " << fit
            << " connections, not the " << options.maxConnections << " the server may hold; serving at most " << fit
            << ". To allow all of them, raise the hard limit to at least "
            << quint64(options.maxConnections) * 2 + kFilesBesidesConnections
            << " (LimitNOFILE= in the service unit, or `ulimit -Hn` in the shell that starts serve)\n";
        options.maxConnections = fit;
    }
    options.maxConnectionsPerAddress = qMin(options.maxConnectionsPerAddress, options.maxConnections);
}

} // namespace

int serveCommand(const QStringList& arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Runs the coordinator's HTTPS server in the foreground, logging to stderr, until SIGTERM or SIGINT; then it "
        "finishes requests in flight, folds in every received update and writes the weights to disk."));
    parser.addHelpOption();
    parser.addOption({QStringLiteral("data-dir"), QStringLiteral("The data directory made by init."), QStringLiteral("DIR")});
    parser.addOption({QStringLiteral("port"), QStringLiteral("Override the configured port (0: any free port)."),
                      QStringLiteral("PORT")});
    if (!parser.parse(arguments))
        return usageError(parser.errorText(), QStringLiteral("serve"));
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << parser.helpText();
        return 0;
    }
    if (!parser.isSet(QStringLiteral("data-dir")))
        return usageError(QStringLiteral("--data-dir DIR is required"), QStringLiteral("serve"));
    const DataDirectory dir(parser.value(QStringLiteral("data-dir")));
    auto config = dir.loadConfig();
    if (!config)
        return failure(config.error());
    if (parser.isSet(QStringLiteral("port"))) {
        bool ok = false;
        const int port = parser.value(QStringLiteral("port")).toInt(&ok);
        if (!ok || port < 0 || port > 65535)
            return usageError(QStringLiteral("--port: expected 0 to 65535"), QStringLiteral("serve"));
        config->listenPort = quint16(port);
    }

    // Signals are taken by this thread alone (sigtimedwait below); every thread started from here inherits the mask.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    SystemClock clock;
    auto coordinator = Coordinator::open(dir, *config, clock);
    if (!coordinator)
        return failure(coordinator.error());
    {
        ApiHandler handler(**coordinator);
        HttpServerOptions options;
        options.host = config->listenHost;
        options.port = config->listenPort;
        options.certificatePath = dir.certificatePath();
        options.privateKeyPath = dir.tlsKeyPath();
        options.uploadDir = dir.uploadsDir();
        options.threads = config->httpThreads;
        options.maxConnectionsPerAddress = config->maxConnectionsPerAddress;
        for (const QString& proxy : config->trustedProxies) // as the server writes addresses
            options.trustedProxies << QHostAddress(proxy).toString();
        fitConnectionsToOpenFiles(options);
        HttpServer server(options, handler);
        if (auto s = server.start(); !s) {
            (*coordinator)->shutdown();
            return failure(s.error());
        }
        Coordinator* started = coordinator->get();
        started->state().call([started, &server] { started->setListeningPort(server.port()); });
        CoordinatorConfig shown = *config;
        shown.listenPort = server.port();
        QTextStream(stderr) << "gleaner-coordinator: serving https://" << config->listenHost << ':'
                            << server.port() << " (agents use " << shown.url() << "); data in " << dir.root()
                            << "; state in "
                            << (config->database.isEmpty()
                                    ? dir.databasePath()
                                    : QUrl(config->database).toString(QUrl::RemovePassword))
                            << "; weights in "
                            << (config->redis.isEmpty() ? QStringLiteral("memory")
                                                        : QUrl(config->redis).toString(QUrl::RemovePassword))
                            << (config->isShared()
                                    ? QStringLiteral("; one of the deployment's coordinators, files in ") +
                                          config->sharedDir
                                    : QString())
                            << "\n";
        QTextStream(stdout) << "port " << server.port() << "\n" << Qt::flush;
        // Where this server really listens (the configured port may be 0): the CLI's admin commands read it.
        const Status noted = dir.writeServerInfo(ServerInfo{qint64(::getpid()), config->listenHost, server.port()});
        if (!noted)
            QTextStream(stderr) << "gleaner-coordinator: " << noted.error() << "\n";

        const timespec tick{0, 250'000'000};
        std::atomic<bool> tickQueued{false};
        for (;;) {
            const int signal = sigtimedwait(&signals, nullptr, &tick);
            if (signal == SIGINT || signal == SIGTERM) {
                QTextStream(stderr) << "gleaner-coordinator: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
                                    << ": finishing requests in flight and writing the weights to disk\n";
                break;
            }
            // One tick at a time: a state thread that is behind does not get a queue of them.
            Coordinator* core = coordinator->get();
            if (!tickQueued.exchange(true))
                core->state().post([core, &tickQueued] {
                    core->tick();
                    tickQueued = false;
                });
        }
        server.stop(10'000);
        dir.removeServerInfo();
    }
    (*coordinator)->shutdown();
    QTextStream(stderr) << "gleaner-coordinator: stopped\n";
    return 0;
}

} // namespace gleaner::coordinator::cli
