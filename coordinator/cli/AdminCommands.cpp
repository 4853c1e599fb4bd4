// gleaner-coordinator job | token | agent: talk to the running server's admin API with the admin token from the
// data directory, over HTTPS verified against the data directory's certificate.
#include "cli/Cli.h"
#include "config/DataDirectory.h"
#include "enrollment/EnrollmentTokenTerms.h"
#include "http/HttpsClient.h"

#include <QCommandLineParser>
#include <QDateTime>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTextStream>

namespace gleaner::coordinator::cli {
namespace {

struct Command
{
    QString group;                     // "job"
    QString name;                      // "submit"
    QStringList positional;            // after the group and name
    QCommandLineParser* parser = nullptr;
    bool json() const { return parser->isSet(QStringLiteral("json")); }
};

// The running server, reached as the CLI on its machine reaches it.
class AdminConnection
{
public:
    static Result<AdminConnection> open(const QString& dataDir)
    {
        const DataDirectory dir(dataDir);
        auto config = dir.loadConfig();
        if (!config)
            return fail(config.error());
        auto token = dir.readAdminToken();
        if (!token)
            return fail(token.error());
        QString host = config->listenHost;
        quint16 port = config->listenPort;
        if (const auto running = dir.readServerInfo())
            port = running->port;
        if (host == u"0.0.0.0" || host.isEmpty())
            host = QStringLiteral("127.0.0.1");
        else if (host == u"::")
            host = QStringLiteral("::1");
        return AdminConnection(host, port, dir.certificatePath(), *token);
    }

    Result<QJsonObject> call(const QByteArray& method, const QByteArray& target, const QByteArray& body = {})
    {
        auto response = m_client->request(method, target, body, "application/json", {}, m_token);
        if (!response)
            return fail(response.error());
        const QJsonObject json = QJsonDocument::fromJson(response->body).object();
        if (response->status >= 300)
            return fail(json.value(QStringLiteral("error")).toString(QStringLiteral("the server answered %1")
                                                                         .arg(response->status)));
        return json;
    }

    Status download(const QByteArray& target, const QString& path)
    {
        // Into a temporary file beside the target, renamed when complete: a failed export leaves no half file.
        const QString partial = path + QStringLiteral(".part");
        auto response = m_client->download(target, partial, {}, m_token);
        if (!response) {
            QFile::remove(partial);
            return fail(response.error());
        }
        if (response->status != 200) {
            QFile::remove(partial);
            return fail(QJsonDocument::fromJson(response->body).object().value(QStringLiteral("error")).toString(
                QStringLiteral("the server answered %1").arg(response->status)));
        }
        QFile::remove(path);
        if (!QFile::rename(partial, path))
            return fail(QStringLiteral("%1: cannot write the weights there").arg(path));
        return {};
    }

private:
    AdminConnection(const QString& host, quint16 port, const QString& ca, QByteArray token)
        : m_client(std::make_shared<HttpsClient>(host, port, ca)), m_token(std::move(token))
    {
    }
    std::shared_ptr<HttpsClient> m_client;
    QByteArray m_token;
};

QString when(const QJsonValue& ms)
{
    return ms.isDouble() ? QDateTime::fromMSecsSinceEpoch(ms.toInteger()).toString(Qt::ISODate) : QStringLiteral("-");
}

QString percent(const QJsonValue& value)
{
    return value.isDouble() ? QString::number(value.toDouble() * 100.0, 'f', 2) + u'%' : QStringLiteral("-");
}

int jobLine(QTextStream& out, const QJsonObject& job)
{
    out << job.value(QStringLiteral("id")).toInteger() << "  " << job.value(QStringLiteral("name")).toString() << "  "
        << job.value(QStringLiteral("state")).toString() << "  epoch " << job.value(QStringLiteral("epoch")).toInt()
        << "/" << job.value(QStringLiteral("max_epochs")).toInt() << "  accuracy "
        << percent(job.value(QStringLiteral("accuracy"))) << "  updates "
        << job.value(QStringLiteral("updates")).toInteger() << "  agents " << job.value(QStringLiteral("agents")).toInt()
        << "\n";
    return 0;
}

int runJob(const Command& cmd, AdminConnection& server)
{
    QTextStream out(stdout);
    const auto id = [&]() -> QByteArray { return cmd.positional.value(0).toLatin1(); };
    if (cmd.name == u"submit") {
        QFile file(cmd.positional.value(0));
        if (!file.open(QIODevice::ReadOnly))
            return failure(QStringLiteral("%1: cannot read the job spec: %2").arg(file.fileName(), file.errorString()));
        auto reply = server.call("POST", "/api/v1/admin/jobs", file.readAll());
        if (!reply)
            return failure(QStringLiteral("%1: %2").arg(file.fileName(), reply.error()));
        if (cmd.json())
            printJson(*reply);
        else
            out << "submitted job " << reply->value(QStringLiteral("id")).toInteger()
                << "; it imports its dataset, then starts (gleaner-coordinator job status ID)\n";
        // A TorchScript model: what the coordinator found in it, by the names PyTorch's state_dict uses.
        const QJsonArray tensors = reply->value(QStringLiteral("model_tensors")).toArray();
        if (!cmd.json() && !tensors.isEmpty()) {
            out << "the model's " << tensors.size() << " tensors (parameters, then buffers):\n";
            for (const QJsonValue& value : tensors) {
                const QJsonObject tensor = value.toObject();
                QStringList shape;
                for (const QJsonValue& d : tensor.value(QStringLiteral("shape")).toArray())
                    shape << QString::number(d.toInteger());
                out << "  " << tensor.value(QStringLiteral("name")).toString() << " [" << shape.join(QStringLiteral(", "))
                    << "] " << tensor.value(QStringLiteral("dtype")).toString() << "\n";
            }
        }
        return 0;
    }
    if (cmd.name == u"list") {
        auto reply = server.call("GET", "/api/v1/admin/jobs");
        if (!reply)
            return failure(reply.error());
        if (cmd.json())
            printJson(*reply);
        else if (reply->value(QStringLiteral("jobs")).toArray().isEmpty())
            out << "no jobs; submit one with: gleaner-coordinator job submit --data-dir DIR JOB.json\n";
        for (const auto& job : reply->value(QStringLiteral("jobs")).toArray())
            if (!cmd.json())
                jobLine(out, job.toObject());
        return 0;
    }
    if (cmd.name == u"status") {
        auto reply = server.call("GET", "/api/v1/admin/jobs/" + id());
        if (!reply)
            return failure(reply.error());
        if (cmd.json()) {
            printJson(*reply);
            return 0;
        }
        jobLine(out, *reply);
        if (!reply->value(QStringLiteral("reason")).toString().isEmpty())
            out << "  " << reply->value(QStringLiteral("reason")).toString() << "\n";
        for (const auto& point : reply->value(QStringLiteral("history")).toArray())
            out << "  epoch " << point[QStringLiteral("epoch")].toInt() << "  accuracy "
                << percent(point[QStringLiteral("accuracy")]) << "  loss "
                << QString::number(point[QStringLiteral("loss")].toDouble(), 'f', 4) << "  at "
                << when(point[QStringLiteral("at_ms")]) << "\n";
        if (const qint64 lost = reply->value(QStringLiteral("updates_not_folded")).toInteger(); lost > 0) {
            out << "  " << lost << " accepted update(s) are not in the weights:\n";
            for (const auto& update : reply->value(QStringLiteral("not_folded")).toArray())
                out << "    update " << update[QStringLiteral("seq")].toInteger() << " of agent "
                    << update[QStringLiteral("agent")].toString() << ": " << update[QStringLiteral("reason")].toString()
                    << "\n";
        }
        return 0;
    }
    if (cmd.name == u"pause" || cmd.name == u"resume" || cmd.name == u"cancel") {
        auto reply = server.call("POST", "/api/v1/admin/jobs/" + id() + '/' + cmd.name.toLatin1());
        if (!reply)
            return failure(reply.error());
        if (cmd.json())
            printJson(*reply);
        else
            out << "job " << reply->value(QStringLiteral("id")).toInteger() << " is "
                << reply->value(QStringLiteral("state")).toString() << "\n";
        return 0;
    }
    if (cmd.name == u"export") {
        const QString path = cmd.parser->value(QStringLiteral("out"));
        const QString format = cmd.parser->value(QStringLiteral("format"));
        const bool script = format == u"torchscript";
        if (auto s = server.download("/api/v1/admin/jobs/" + id() + (script ? "/torchscript" : "/weights"), path); !s)
            return failure(s.error());
        if (cmd.json())
            printJson(QJsonObject{{QStringLiteral("id"), id().toLongLong()}, {QStringLiteral("file"), path},
                                  {QStringLiteral("format"), script ? format : QStringLiteral("safetensors")}});
        else if (script)
            out << "wrote job " << id() << "'s TorchScript program with its weights to " << path
                << " (Python: torch.jit.load(\"" << path << "\"))\n";
        else
            out << "wrote the weights of job " << id() << " to " << path
                << " (Python: model.load_state_dict(safetensors.torch.load_file(\"" << path << "\")))\n";
        return 0;
    }
    return usageError(QStringLiteral("unknown job command \"%1\"").arg(cmd.name), QStringLiteral("job"));
}

int runToken(const Command& cmd, AdminConnection& server)
{
    QTextStream out(stdout);
    if (cmd.name == u"create") {
        EnrollmentTokenTerms terms;
        if (cmd.parser->isSet(QStringLiteral("uses"))) {
            const auto uses = EnrollmentTokenTerms::parseUses(cmd.parser->value(QStringLiteral("uses")));
            if (!uses)
                return usageError(QStringLiteral("--uses: %1").arg(uses.error()), QStringLiteral("token create"));
            terms.uses = *uses;
        }
        if (cmd.parser->isSet(QStringLiteral("expires"))) {
            const auto lifetime = EnrollmentTokenTerms::parseLifetime(cmd.parser->value(QStringLiteral("expires")));
            if (!lifetime)
                return usageError(QStringLiteral("--expires: %1").arg(lifetime.error()), QStringLiteral("token create"));
            terms.lifetimeSeconds = *lifetime;
        }
        const QJsonObject request = terms.toJson();
        auto reply = server.call("POST", "/api/v1/admin/tokens", QJsonDocument(request).toJson(QJsonDocument::Compact));
        if (!reply)
            return failure(reply.error());
        if (cmd.json())
            printJson(*reply);
        else
            out << reply->value(QStringLiteral("token")).toString() << "\n";
        return 0;
    }
    if (cmd.name == u"list") {
        auto reply = server.call("GET", "/api/v1/admin/tokens");
        if (!reply)
            return failure(reply.error());
        if (cmd.json()) {
            printJson(*reply);
            return 0;
        }
        for (const auto& value : reply->value(QStringLiteral("tokens")).toArray()) {
            const QJsonObject token = value.toObject();
            out << token.value(QStringLiteral("id")).toInteger() << "  " << token.value(QStringLiteral("state")).toString()
                << "  used " << token.value(QStringLiteral("used")).toInteger() << "  uses left "
                << (token.value(QStringLiteral("uses_left")).isNull() ? QStringLiteral("unlimited")
                                                                      : QString::number(token.value(QStringLiteral("uses_left")).toInteger()))
                << "  expires " << when(token.value(QStringLiteral("expires_ms"))) << "\n";
        }
        return 0;
    }
    if (cmd.name == u"revoke") {
        auto reply = server.call("POST", "/api/v1/admin/tokens/" + cmd.positional.value(0).toLatin1() + "/revoke");
        if (!reply)
            return failure(reply.error());
        if (cmd.json())
            printJson(*reply);
        else
            out << "revoked enrollment token " << cmd.positional.value(0) << "\n";
        return 0;
    }
    return usageError(QStringLiteral("unknown token command \"%1\"").arg(cmd.name), QStringLiteral("token"));
}

int runAgent(const Command& cmd, AdminConnection& server)
{
    QTextStream out(stdout);
    if (cmd.name == u"list") {
        auto reply = server.call("GET", "/api/v1/admin/agents");
        if (!reply)
            return failure(reply.error());
        if (cmd.json()) {
            printJson(*reply);
            return 0;
        }
        for (const auto& value : reply->value(QStringLiteral("agents")).toArray()) {
            const QJsonObject a = value.toObject();
            out << a.value(QStringLiteral("id")).toString() << "  " << a.value(QStringLiteral("name")).toString() << "  "
                << (a.value(QStringLiteral("revoked")).toBool()       ? "revoked"
                    : a.value(QStringLiteral("quarantined")).toBool() ? "quarantined"
                                                                        : "active")
                << "  done "
                << a.value(QStringLiteral("done")).toInteger() << "  timed out "
                << a.value(QStringLiteral("timed_out")).toInteger() << "  invalid "
                << a.value(QStringLiteral("invalid")).toInteger() << "  failed "
                << a.value(QStringLiteral("failed")).toInteger() << "  last seen "
                << when(a.value(QStringLiteral("last_seen_ms"))) << "\n";
            if (a.value(QStringLiteral("quarantined")).toBool())
                out << "    quarantined: " << a.value(QStringLiteral("quarantine_reason")).toString()
                    << "\n    (lift it with: gleaner-coordinator agent release " << a.value(QStringLiteral("id")).toString()
                    << ")\n";
        }
        return 0;
    }
    if (cmd.name == u"release") {
        auto reply = server.call("POST", "/api/v1/admin/agents/" + cmd.positional.value(0).toLatin1() + "/release");
        if (!reply)
            return failure(reply.error());
        if (cmd.json())
            printJson(*reply);
        else if (reply->value(QStringLiteral("was_quarantined")).toBool())
            out << "lifted the quarantine of agent " << cmd.positional.value(0) << ": it gets work again\n";
        else
            out << "agent " << cmd.positional.value(0) << " was not quarantined\n";
        return 0;
    }
    if (cmd.name == u"revoke") {
        auto reply = server.call("POST", "/api/v1/admin/agents/" + cmd.positional.value(0).toLatin1() + "/revoke");
        if (!reply)
            return failure(reply.error());
        if (cmd.json())
            printJson(*reply);
        else
            out << "revoked agent " << cmd.positional.value(0) << "\n";
        return 0;
    }
    return usageError(QStringLiteral("unknown agent command \"%1\"").arg(cmd.name), QStringLiteral("agent"));
}

struct Spec
{
    const char* name;
    int positional;          // how many positional arguments
    const char* arguments;   // for the usage line
    const char* description;
};

int dispatch(const QString& group, const QStringList& arguments, std::initializer_list<Spec> commands,
             int (*runner)(const Command&, AdminConnection&))
{
    const QString name = arguments.value(1);
    QString overview = QStringLiteral("usage: gleaner-coordinator %1 COMMAND --data-dir DIR [options]\n\n").arg(group);
    for (const Spec& spec : commands)
        overview += QStringLiteral("  %1 %2\n      %3\n")
                        .arg(QString::fromLatin1(spec.name), QString::fromLatin1(spec.arguments),
                             QString::fromLatin1(spec.description));
    if (name.isEmpty() || name == u"--help" || name == u"-h") {
        QTextStream(name.isEmpty() ? stderr : stdout) << overview;
        return name.isEmpty() ? 2 : 0;
    }
    const Spec* spec = nullptr;
    for (const Spec& candidate : commands)
        if (name == QLatin1String(candidate.name))
            spec = &candidate;
    if (!spec) {
        QTextStream(stderr) << "gleaner-coordinator " << group << ": unknown command \"" << name << "\"\n\n" << overview;
        return 2;
    }

    QCommandLineParser parser;
    parser.setApplicationDescription(QString::fromLatin1(spec->description));
    parser.addHelpOption();
    parser.addOption({QStringLiteral("data-dir"), QStringLiteral("The coordinator's data directory."), QStringLiteral("DIR")});
    parser.addOption({QStringLiteral("json"), QStringLiteral("Print JSON for scripts.")});
    if (group == u"job" && name == u"export") {
        parser.addOption({QStringLiteral("out"), QStringLiteral("Where to write the weights."), QStringLiteral("FILE")});
        parser.addOption({QStringLiteral("format"),
                          QStringLiteral("safetensors (default): the weights, named as PyTorch's state_dict names "
                                         "them; torchscript: a TorchScript job's program with its weights, for "
                                         "torch.jit.load."),
                          QStringLiteral("FORMAT"), QStringLiteral("safetensors")});
    }
    if (group == u"token" && name == u"create") {
        parser.addOption({QStringLiteral("uses"),
                          QStringLiteral("How many agents may enroll with it, 1 to 1000000 (default: any number "
                                         "until it expires)."),
                          QStringLiteral("N")});
        parser.addOption({QStringLiteral("expires"),
                          QStringLiteral("Lifetime such as 30m, 12h or 30d, at most 3650d (default: 7d); \"never\" "
                                         "makes a token that works until it is revoked."),
                          QStringLiteral("DURATION")});
    }
    const QString command = group + u' ' + name;
    if (!parser.parse(arguments.mid(1)))
        return usageError(parser.errorText(), command);
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << "usage: gleaner-coordinator " << command << " " << spec->arguments << "\n\n" << parser.helpText();
        return 0;
    }
    if (!parser.isSet(QStringLiteral("data-dir")))
        return usageError(QStringLiteral("--data-dir DIR is required"), command);
    if (parser.positionalArguments().size() != spec->positional)
        return usageError(QStringLiteral("expected %1 argument(s): %2").arg(spec->positional).arg(QString::fromLatin1(spec->arguments)),
                          command);
    for (const QString& id : parser.positionalArguments()) {
        bool numeric = false;
        id.toLongLong(&numeric);
        if (spec->positional == 1 && !(group == u"job" && name == u"submit") && !(group == u"agent") && !numeric)
            return usageError(QStringLiteral("\"%1\" is not an id; ids are numbers (see `%2 list`)").arg(id, group), command);
    }
    if (group == u"job" && name == u"export" && !parser.isSet(QStringLiteral("out")))
        return usageError(QStringLiteral("--out FILE is required"), command);
    if (group == u"job" && name == u"export" &&
        !QStringList{QStringLiteral("safetensors"), QStringLiteral("torchscript")}.contains(parser.value(QStringLiteral("format"))))
        return usageError(QStringLiteral("--format must be safetensors or torchscript, not \"%1\"")
                              .arg(parser.value(QStringLiteral("format"))),
                          command);
    auto server = AdminConnection::open(parser.value(QStringLiteral("data-dir")));
    if (!server)
        return failure(server.error());
    return runner(Command{group, name, parser.positionalArguments(), &parser}, *server);
}

int runKey(const Command& cmd, AdminConnection& server)
{
    QTextStream out(stdout);
    if (cmd.name == u"show") {
        auto reply = server.call("GET", "/api/v1/admin/signing-key");
        if (!reply)
            return failure(reply.error());
        if (cmd.json()) {
            printJson(*reply);
            return 0;
        }
        out << "manifests are signed with key " << reply->value(QStringLiteral("fingerprint")).toString() << "\n"
            << "rotations since the first key: " << reply->value(QStringLiteral("rotations")).toArray().size()
            << "\n";
        return 0;
    }
    if (cmd.name == u"rotate") {
        auto reply = server.call("POST", "/api/v1/admin/signing-key/rotate");
        if (!reply)
            return failure(reply.error());
        if (cmd.json())
            printJson(*reply);
        else
            out << "new manifests are signed with key " << reply->value(QStringLiteral("fingerprint")).toString()
                << "\n(it replaces " << reply->value(QStringLiteral("previous_fingerprint")).toString()
                << ", which signed the announcement; agents switch on their next lease request without "
                   "enrolling again)\n";
        return 0;
    }
    return usageError(QStringLiteral("unknown key command \"%1\"").arg(cmd.name), QStringLiteral("key"));
}

} // namespace

int jobCommand(const QStringList& arguments)
{
    return dispatch(QStringLiteral("job"), arguments,
                    {{"submit", 1, "JOB.json", "Submits a job spec; prints its id."},
                     {"list", 0, "", "Lists the jobs with state, epoch, accuracy and updates."},
                     {"status", 1, "ID", "Shows a job and its accuracy per epoch."},
                     {"pause", 1, "ID", "Stops handing out the job's subtasks; results in flight are kept."},
                     {"resume", 1, "ID", "Hands out a paused job's subtasks again."},
                     {"cancel", 1, "ID", "Ends a job for good; its weights stay exportable."},
                     {"export", 1, "ID --out FILE [--format safetensors|torchscript]",
                      "Writes the job's current weights (their average when it keeps one) as safetensors, or "
                      "a TorchScript job's program with them."}},
                    runJob);
}

int tokenCommand(const QStringList& arguments)
{
    return dispatch(QStringLiteral("token"), arguments,
                    {{"create", 0, "[--uses N] [--expires DURATION|never]",
                      "Creates an enrollment token that lives 7 days unless --expires says otherwise, and prints it "
                      "once."},
                     {"list", 0, "", "Lists enrollment tokens (not their secret values)."},
                     {"revoke", 1, "ID", "Revokes an enrollment token; agents enrolled with it keep working."}},
                    runToken);
}

int agentCommand(const QStringList& arguments)
{
    return dispatch(QStringLiteral("agent"), arguments,
                    {{"list", 0, "", "Lists agents with their record of subtasks."},
                     {"revoke", 1, "ID", "Revokes an agent: its next request is refused."},
                     {"release", 1, "ID",
                      "Lifts an agent's quarantine (set after repeated refused results): it gets work again."}},
                    runAgent);
}

int keyCommand(const QStringList& arguments)
{
    return dispatch(QStringLiteral("key"), arguments,
                    {{"show", 0, "", "Shows the fingerprint of the key that signs manifests, and how many rotations "
                                     "led to it."},
                     {"rotate", 0, "",
                      "Replaces the manifest signing key with a new one, announced by a statement the old key "
                      "signs; agents follow it without enrolling again. The old private key is not kept."}},
                    runKey);
}

} // namespace gleaner::coordinator::cli
