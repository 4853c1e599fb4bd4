// gleaner-worker: trains one subtask in a task folder for the agent that started it. See worker/WorkerRun.h.
#include "worker/ProcessPriority.h"
#include "worker/WorkerRun.h"
#include "worker/WorkerSandbox.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTextStream>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

using namespace gleaner::agent;

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("gleaner-worker"));
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Trains one Gleaner subtask in a task folder prepared by the agent, at the lowest OS priority, and reports "
        "JSON events on stdout. Reads commands on stdin: pause, resume, checkpoint, stop, cancel. Exit codes: 0 done, "
        "1 failed, 2 usage, 3 stopped with a checkpoint, 4 cancelled."));
    parser.addHelpOption();
    parser.addOption({QStringLiteral("task"), QStringLiteral("The task folder."), QStringLiteral("DIR")});
    parser.addOption({QStringLiteral("threads"), QStringLiteral("Compute threads (default: libtorch's)."), QStringLiteral("N")});
    parser.addOption({QStringLiteral("cpu-share"), QStringLiteral("Fraction of time spent computing, (0, 1] (default 1)."),
                      QStringLiteral("S")});
    parser.addOption({QStringLiteral("checkpoint-interval"), QStringLiteral("Seconds between checkpoints (default 60; 0 only on request)."),
                      QStringLiteral("SECONDS")});
    parser.addOption({QStringLiteral("device"), QStringLiteral("cpu, cuda, cuda:N or auto (default cpu)."), QStringLiteral("DEVICE")});
    parser.addOption({QStringLiteral("max-memory-mb"),
                      QStringLiteral("Memory cap in MiB the kernel enforces (RLIMIT_DATA); an allocation past it fails the "
                                     "subtask (default 0: none)."),
                      QStringLiteral("MB")});
    parser.addOption({QStringLiteral("allow-unconfined-models"),
                      QStringLiteral("Train a TorchScript model even when neither the system-call filter nor the memory "
                                     "cap could be applied (the owner's allow_unconfined_models).")});
    if (!parser.parse(QCoreApplication::arguments())) {
        QTextStream(stderr) << "gleaner-worker: " << parser.errorText() << "\n";
        return WorkerUsage;
    }
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << parser.helpText();
        return 0;
    }
    WorkerOptions options;
    options.taskDir = parser.value(QStringLiteral("task"));
    if (options.taskDir.isEmpty()) {
        QTextStream(stderr) << "gleaner-worker: --task DIR is required\n";
        return WorkerUsage;
    }
    bool ok = true;
    if (parser.isSet(QStringLiteral("threads")))
        options.threads = parser.value(QStringLiteral("threads")).toInt(&ok);
    if (ok && parser.isSet(QStringLiteral("cpu-share")))
        options.cpuShare = parser.value(QStringLiteral("cpu-share")).toDouble(&ok);
    if (ok && parser.isSet(QStringLiteral("checkpoint-interval")))
        options.checkpointIntervalSeconds = parser.value(QStringLiteral("checkpoint-interval")).toDouble(&ok);
    qint64 maxMemoryMb = 0;
    if (ok && parser.isSet(QStringLiteral("max-memory-mb")))
        maxMemoryMb = parser.value(QStringLiteral("max-memory-mb")).toLongLong(&ok);
    if (!ok || options.threads < 0 || options.checkpointIntervalSeconds < 0 || maxMemoryMb < 0 ||
        maxMemoryMb > (qint64(1) << 40)) {
        QTextStream(stderr) << "gleaner-worker: --threads, --cpu-share, --checkpoint-interval and --max-memory-mb take "
                               "non-negative numbers\n";
        return WorkerUsage;
    }
    if (parser.isSet(QStringLiteral("device")))
        options.device = parser.value(QStringLiteral("device"));
    options.allowUnconfinedModels = parser.isSet(QStringLiteral("allow-unconfined-models"));

    // The agent reads the events; when it dies, a write to the pipe would raise SIGPIPE and end the worker
    // before it saw the end of its stdin and checkpointed. Ignored, a write just fails, and the work is kept.
    std::signal(SIGPIPE, SIG_IGN);
    // The agent decides when the worker stops: a batch system's scancel or a service manager signals every process
    // of the job, and a worker that died on that signal would lose the work since its last checkpoint, while the
    // agent is about to ask it for a fresh one and hand it back (docs/clusters.md). The end of its stdin stops it.
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGHUP, SIG_IGN);
    std::mutex out;
    const auto emit = [&out](const QJsonObject& event) {
        const QByteArray line = QJsonDocument(event).toJson(QJsonDocument::Compact);
        std::lock_guard lock(out);
        std::fwrite(line.constData(), 1, size_t(line.size()), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
    };

    const QStringList problems = lowerProcessPriority();
    if (!problems.isEmpty())
        QTextStream(stderr) << "gleaner-worker: could not lower its priority fully: " << problems.join(QStringLiteral("; "))
                            << "\n";

    // Confined before it reads anything from the task folder and before it starts a thread (Landlock holds for
    // the calling thread and those it starts); the agent learns from the first event how far.
    const bool gpu = options.device.startsWith(u"cuda") || options.device == u"auto";
    SandboxLimits limits;
    limits.maxMemoryBytes = maxMemoryMb * 1024 * 1024;
    limits.stackAllowanceBytes = SandboxLimits::stackAllowance(options.threads);
    const SandboxReport sandbox = WorkerSandbox::apply(SandboxRules::forWorker(options.taskDir, gpu), limits);
    emit(sandbox.toEvent());
    options.memoryCapBytes = sandbox.memoryCapBytes;
    options.syscallFilter = sandbox.seccomp;

    WorkerControl control;
    // Commands arrive on stdin; its end means the agent is gone, and the work is checkpointed for the next one.
    std::thread([&control, &emit] {
        std::string line;
        while (std::getline(std::cin, line)) {
            if (!control.apply(QString::fromStdString(line)))
                emit(QJsonObject{{QStringLiteral("event"), QStringLiteral("warning")},
                                 {QStringLiteral("message"), QStringLiteral("unknown command \"%1\"").arg(QString::fromStdString(line))}});
        }
        control.stop();
    }).detach();

    return runWorker(options, control, emit);
}
