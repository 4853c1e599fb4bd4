#include "store/SqlDatabase.h"

#include "crypto/SecureFile.h"
#include "store/PostgresDdl.h"

#include <QRegularExpression>
#include <QSqlDriver>
#include <QSqlError>
#include <QSqlField>
#include <QUrl>
#include <QUrlQuery>
#include <QUuid>

#include <algorithm>

namespace gleaner {
namespace {

// What a connection needs from a postgresql:// URL, each part checked; the error says which part is wrong.
struct PostgresTarget
{
    QString host; // a name, an address, or the directory of a unix socket
    int port = 5432;
    QString user;
    QString password;
    QString passfile; // a password file in libpq's format (?passfile=/path), which libpq reads
    // TLS to a server on another machine, as libpq takes it: ?sslmode=verify-full&sslrootcert=/path/ca.pem
    QString sslmode;
    QString sslrootcert;
    QString database;
    QString shown; // the URL without its password, for messages
};

Result<PostgresTarget> parsePostgresUrl(const QString& text)
{
    const QUrl url(text, QUrl::StrictMode);
    // Never echo `text`: it may hold the password. What is shown of it below has none.
    QUrl withoutPassword = url;
    withoutPassword.setPassword(QString());
    PostgresTarget target;
    target.shown = withoutPassword.toString();
    const auto wrong = [&](const QString& what) {
        return fail(QStringLiteral(
                        "the PostgreSQL URL %1 %2; expected postgresql://user[:password]@host[:port]/dbname")
                        .arg(target.shown, what));
    };
    if (!url.isValid()) {
        // QUrl's own message quotes the text, password and all: it is told about the text without the
        // password.
        QString redacted = text;
        redacted.replace(QRegularExpression(QStringLiteral("^([A-Za-z]+://[^:@/?]*):[^@]*@")),
                         QStringLiteral("\\1@"));
        const QUrl shown(redacted, QUrl::StrictMode);
        target.shown = QStringLiteral("\"%1\"").arg(redacted);
        return wrong(shown.isValid()
                         ? QStringLiteral("is not a valid URL (a character of its password may need "
                                          "percent-encoding)")
                         : QStringLiteral("is not a valid URL: %1").arg(shown.errorString()));
    }
    if (url.scheme() != u"postgresql" && url.scheme() != u"postgres")
        return wrong(QStringLiteral("has the scheme \"%1\", not postgresql").arg(url.scheme()));
    target.user = url.userName();
    if (target.user.isEmpty())
        return wrong(QStringLiteral("names no user"));
    target.password = url.password();
    if (url.port() == 0)
        return wrong(QStringLiteral("has the port 0"));
    target.port = url.port(5432);
    target.database = url.path().mid(1);
    if (!url.path().startsWith(u'/') || target.database.isEmpty() || target.database.contains(u'/'))
        return wrong(QStringLiteral("does not end in the database's name (/dbname)"));
    const QUrlQuery query(url);
    const QString socketDir = query.queryItemValue(QStringLiteral("host"), QUrl::FullyDecoded);
    static const QStringList taken{QStringLiteral("host"), QStringLiteral("passfile"), QStringLiteral("sslmode"),
                                   QStringLiteral("sslrootcert")};
    for (const auto& [key, value] : query.queryItems())
        if (!taken.contains(key))
            return wrong(QStringLiteral("has the parameter \"%1\", which Gleaner does not take (only "
                                        "host=/socket/dir, passfile=/password/file, sslmode=MODE and "
                                        "sslrootcert=/ca.pem)")
                             .arg(key));
    target.sslmode = query.queryItemValue(QStringLiteral("sslmode"), QUrl::FullyDecoded);
    static const QStringList modes{QStringLiteral("disable"), QStringLiteral("allow"), QStringLiteral("prefer"),
                                   QStringLiteral("require"), QStringLiteral("verify-ca"),
                                   QStringLiteral("verify-full")};
    if (query.hasQueryItem(QStringLiteral("sslmode")) && !modes.contains(target.sslmode))
        return wrong(QStringLiteral("has sslmode=%1; expected one of %2 (verify-full to a server on another "
                                    "machine)")
                         .arg(target.sslmode, modes.join(QStringLiteral(", "))));
    target.sslrootcert = query.queryItemValue(QStringLiteral("sslrootcert"), QUrl::FullyDecoded);
    if (query.hasQueryItem(QStringLiteral("sslrootcert")) &&
        (!target.sslrootcert.startsWith(u'/') || target.sslrootcert.contains(u';')))
        return wrong(QStringLiteral("has sslrootcert=%1, which is not an absolute path (without ';')")
                         .arg(target.sslrootcert));
    target.passfile = query.queryItemValue(QStringLiteral("passfile"), QUrl::FullyDecoded);
    if (query.hasQueryItem(QStringLiteral("passfile")) && !target.passfile.startsWith(u'/'))
        return wrong(QStringLiteral("has passfile=%1, which is not an absolute path").arg(target.passfile));
    // The driver splits its options at ';': a path with one would be cut short.
    if (target.passfile.contains(u';') || target.passfile.contains(QChar(0)))
        return wrong(QStringLiteral("has a passfile path with a ';' in it; move the file to a path without one"));
    if (!target.passfile.isEmpty() && !target.password.isEmpty())
        return wrong(QStringLiteral("gives both a password and a passfile; keep the password in the file only"));
    if (!socketDir.isEmpty() && !socketDir.startsWith(u'/'))
        return wrong(
            QStringLiteral("has host=%1, which is not a socket directory (an absolute path)").arg(socketDir));
    if (!socketDir.isEmpty() && !url.host().isEmpty())
        return wrong(QStringLiteral("names both a host and a socket directory"));
    target.host = socketDir.isEmpty() ? url.host() : socketDir;
    if (target.host.isEmpty())
        return wrong(QStringLiteral("names no host (give host[:port], or ?host=/socket/dir)"));
    return target;
}

QString statementText(const QString& sql)
{
    return sql.left(80);
}

} // namespace

SqlDatabase::~SqlDatabase()
{
    if (m_connection.isEmpty())
        return;
    m_db.close();
    m_db = QSqlDatabase();
    QSqlDatabase::removeDatabase(m_connection);
}

Status SqlDatabase::openFile(const QString& path, const SqlSchema& schema)
{
    m_engine = Engine::Sqlite;
    m_name = path;
    m_what = schema.what;
    m_connection = QStringLiteral("gleaner-") + QUuid::createUuid().toString(QUuid::WithoutBraces);
    m_db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), m_connection);
    if (!m_db.isValid())
        return fail(QStringLiteral("the Qt SQLite driver is missing; install Debian's libqt6sql6-sqlite"));
    m_db.setDatabaseName(path);
    m_db.setConnectOptions(QStringLiteral("QSQLITE_BUSY_TIMEOUT=5000"));
    if (!m_db.open())
        return fail(QStringLiteral("%1: cannot open %2: %3").arg(path, m_what, m_db.lastError().text()));
    const char* synchronous = schema.fullSync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
    for (const char* pragma : {"PRAGMA journal_mode=WAL", synchronous, "PRAGMA foreign_keys=ON"})
        if (auto r = exec(QString::fromLatin1(pragma)); !r)
            return fail(r.error());
    return migrate(schema);
}

Status SqlDatabase::openPostgres(const QString& url, const SqlSchema& schema)
{
    auto target = parsePostgresUrl(url);
    if (!target)
        return fail(target.error());
    m_engine = Engine::Postgres;
    m_name = target->shown;
    m_what = schema.what;
    m_connection = QStringLiteral("gleaner-") + QUuid::createUuid().toString(QUuid::WithoutBraces);
    m_db = QSqlDatabase::addDatabase(QStringLiteral("QPSQL"), m_connection);
    if (!m_db.isValid())
        return fail(QStringLiteral("the Qt PostgreSQL driver is missing; install Debian's libqt6sql6-psql"));
    m_db.setHostName(target->host);
    m_db.setPort(target->port);
    m_db.setUserName(target->user);
    m_db.setPassword(target->password);
    m_db.setDatabaseName(target->database);
    QString options = QStringLiteral("connect_timeout=10;application_name=gleaner");
    // Values in conninfo are quoted, with ' and \ escaped (QPSQL passes its options on as they are).
    const auto option = [](const QString& key, QString value) -> QString {
        value.replace(u'\\', QStringLiteral("\\\\")).replace(u'\'', QStringLiteral("\\'"));
        return u';' + key + QStringLiteral("='") + value + u'\'';
    };
    if (!target->passfile.isEmpty()) {
        // Checked here, where a message can name the file and the remedy: libpq skips a file that others may
        // read with only a warning on stderr, and then says no more than that no password was supplied.
        auto secret = SecureFile::read(target->passfile, QStringLiteral("PostgreSQL password file"), 1 << 20, 077,
                                       QStringLiteral("anyone who can read it can log in to the database"));
        if (!secret)
            return fail(QStringLiteral("%1: cannot open %2: %3 (the URL's passfile=)")
                            .arg(m_name, m_what, secret.error()));
        SecureFile::wipe(*secret);
        options += option(QStringLiteral("passfile"), target->passfile); // libpq reads the file itself
    }
    if (!target->sslmode.isEmpty())
        options += option(QStringLiteral("sslmode"), target->sslmode);
    if (!target->sslrootcert.isEmpty())
        options += option(QStringLiteral("sslrootcert"), target->sslrootcert);
    m_db.setConnectOptions(options);
    if (!m_db.open()) {
        // libpq's message may quote the connection string; the password is taken out all the same.
        QString error = m_db.lastError().text().trimmed();
        if (!target->password.isEmpty())
            error.replace(target->password, QStringLiteral("(password)"));
        if (error.contains(u"no password supplied"))
            error += target->passfile.isEmpty()
                         ? QStringLiteral("; the server asks for a password: name a password file in the URL, "
                                          "?passfile=/path (lines host:port:database:user:password, mode 0600; "
                                          "local-postgres.sh writes one and prints the URL that names it)")
                         : QStringLiteral("; %1 has no line for this host, port, database and user "
                                          "(host:port:database:user:password)")
                               .arg(target->passfile);
        else if (error.contains(u"password authentication failed") && !target->passfile.isEmpty())
            error += QStringLiteral("; check the password in %1").arg(target->passfile);
        return fail(QStringLiteral("%1: cannot open %2: %3").arg(m_name, m_what, error));
    }
    return migrate(schema);
}

Result<QSqlQuery> SqlDatabase::exec(const QString& sql, const QVariantList& values)
{
    auto result = execOnce(sql, values);
    // A read changes nothing, so one that found the connection gone runs again on the new one; anything else is
    // left failed (it may have been carried out before the connection went).
    if (!result && reconnectIfLost() && sql.trimmed().startsWith(u"SELECT", Qt::CaseInsensitive))
        return execOnce(sql, values);
    return result;
}

namespace {

// PostgreSQL: `sql` with each `?` outside a quoted literal replaced by its value as the driver writes a
// literal (QPSQL quotes and escapes text as the server's standard_conforming_strings setting asks); nullopt
// when a value is of a type written otherwise (bytes, dates: those take the prepared path) or the count of
// values is not the count of placeholders.
std::optional<QString> withValuesInline(const QString& sql, const QVariantList& values,
                                        const QSqlDriver& driver)
{
    QString text;
    text.reserve(sql.size() + 16 * values.size());
    qsizetype next = 0;
    bool quoted = false;
    for (const QChar c : sql) {
        if (c == u'\'')
            quoted = !quoted; // '' inside a literal toggles twice
        if (c != u'?' || quoted) {
            text.append(c);
            continue;
        }
        if (next >= values.size())
            return std::nullopt;
        const QVariant& value = values.at(next++);
        QSqlField field(QString(), value.metaType());
        switch (value.typeId()) {
        case QMetaType::UnknownType:
            break; // NULL
        case QMetaType::QString:
            if (value.toString().contains(QChar(0)))
                return std::nullopt; // the statement's text would end at the NUL: the prepared path refuses
                                     // it
            field.setValue(value);
            break;
        case QMetaType::Int:
        case QMetaType::UInt:
        case QMetaType::LongLong:
        case QMetaType::ULongLong:
        case QMetaType::Double:
            field.setValue(value);
            break;
        default:
            return std::nullopt;
        }
        text.append(driver.formatValue(field));
    }
    if (next != values.size() || quoted)
        return std::nullopt;
    return text;
}

} // namespace

QVariantList SqlDatabase::boundValues(const QVariantList& values)
{
    QVariantList bound;
    bound.reserve(values.size());
    for (const QVariant& value : values) {
        if (value.typeId() == QMetaType::QString && value.toString().isNull())
            bound.append(QString::fromLatin1(""));
        else if (value.typeId() == QMetaType::Bool) // PostgreSQL will not compare a boolean with a BIGINT
            bound.append(value.toBool() ? 1 : 0);
        else
            bound.append(value);
    }
    return bound;
}

Result<QSqlQuery> SqlDatabase::execOnce(const QString& sql, const QVariantList& values)
{
    QSqlQuery query(m_db);
    const auto failed = [&](const QString& what) {
        if (m_engine == Engine::Postgres && m_depth > 0 && m_failedStatement.isEmpty())
            m_failedStatement = statementText(sql);
        return fail(QStringLiteral("%1: %2: %3").arg(m_name, what, query.lastError().text()));
    };
    // QPSQL prepares server-side (PREPARE ... AS), which PostgreSQL allows for queries but not for DDL: a
    // statement without values runs as it is there. SQLite prepares every statement, as it always did.
    if (m_engine == Engine::Postgres && values.isEmpty()) {
        if (!query.exec(sql))
            return failed(QStringLiteral("\"%1\" failed").arg(statementText(sql)));
        return query;
    }
    // A prepared statement costs QPSQL three round trips (PREPARE, EXECUTE, DEALLOCATE) and the server a plan
    // it uses once; the statement with its values written as literals by the driver costs one.
    if (m_engine == Engine::Postgres) {
        const QVariantList bound = boundValues(values);
        if (const auto text = withValuesInline(sql, bound, *m_db.driver())) {
            if (!query.exec(*text))
                return failed(QStringLiteral("\"%1\" failed").arg(statementText(sql)));
            return query;
        }
    }
    if (!query.prepare(sql)) // QPSQL prepares on the server: a lost connection can show here too
        return failed(QStringLiteral("cannot prepare \"%1\"").arg(statementText(sql)));
    for (const QVariant& value : boundValues(values))
        query.addBindValue(value);
    if (!query.exec())
        return failed(QStringLiteral("\"%1\" failed").arg(statementText(sql)));
    return query;
}

bool SqlDatabase::reconnectIfLost()
{
    // Only between transactions: inside one, the transaction fails as a whole and the next one reconnects (its
    // BEGIN is where a lost connection shows first).
    if (m_engine != Engine::Postgres || m_depth > 0 || m_reconnecting)
        return false;
    {
        QSqlQuery probe(m_db);
        if (probe.exec(QStringLiteral("SELECT 1")))
            return false; // the connection is fine; the statement itself failed
    }
    m_db.close();
    if (!m_db.open()) {
        qWarning("%s: the connection to the database was lost and cannot be opened again yet: %s",
                 qPrintable(m_name), qPrintable(m_db.lastError().text()));
        return false;
    }
    m_reconnecting = true;
    const Status reopened = connectionReopened();
    m_reconnecting = false;
    if (!reopened) {
        qWarning("%s: the connection to the database was opened again, but %s", qPrintable(m_name),
                 qPrintable(reopened.error()));
        m_db.close();
        return false;
    }
    return true;
}

Result<qint64> SqlDatabase::insertReturningId(const QString& sql, const QVariantList& values,
                                              const QString& idColumn)
{
    auto query = exec(sql + QStringLiteral(" RETURNING ") + idColumn, values);
    if (!query)
        return fail(query.error());
    if (!query->next())
        return fail(QStringLiteral("%1: \"%2\" inserted no row").arg(m_name, statementText(sql)));
    bool ok = false;
    const qint64 id = query->value(0).toLongLong(&ok);
    if (!ok)
        return fail(QStringLiteral("%1: \"%2\" gave the id \"%3\", not an integer")
                        .arg(m_name, statementText(sql), query->value(0).toString()));
    return id;
}

Status SqlDatabase::transaction(const std::function<Status()>& work)
{
    if (m_depth > 0) {
        Status status = work();
        if (!status)
            m_nestedFailed = true;
        return status;
    }
    // A connection the PostgreSQL server dropped (a restart, a failover) shows first here, before anything of the
    // transaction ran: it is opened again, and the transaction begins on the new one.
    if (!m_db.transaction() && !(reconnectIfLost() && m_db.transaction()))
        return fail(
            QStringLiteral("%1: cannot begin a transaction: %2").arg(m_name, m_db.lastError().text()));
    ++m_depth;
    m_nestedFailed = false;
    m_commitUncertain = false;
    m_failedStatement.clear();
    Status status = work();
    --m_depth;
    if (status && m_nestedFailed)
        status = fail(QStringLiteral("%1: a step of the transaction failed; nothing was stored").arg(m_name));
    if (status && !m_failedStatement.isEmpty())
        status =
            fail(QStringLiteral("%1: \"%2\" failed inside a transaction, so PostgreSQL stored none of it")
                     .arg(m_name, m_failedStatement));
    if (status && !m_db.commit()) {
        m_commitUncertain = true;
        const QString error = m_db.lastError().text();
        status = fail(QStringLiteral("%1: commit failed: %2").arg(m_name, error));
    }
    if (!status)
        m_db.rollback();
    std::vector<std::function<void(bool)>> then;
    then.swap(m_whenEnds);
    for (auto& each : then)
        each(bool(status));
    return status;
}

void SqlDatabase::whenTransactionEnds(std::function<void(bool committed)> then)
{
    if (m_depth == 0)
        then(true);
    else
        m_whenEnds.push_back(std::move(then));
}

Status SqlDatabase::execSchema(const char* statement)
{
    const QString sql = QString::fromLatin1(statement);
    const QStringList statements = m_engine == Engine::Postgres ? postgresDdl(sql) : QStringList{sql};
    for (const QString& each : statements)
        if (auto r = exec(each); !r)
            return fail(r.error());
    return {};
}

Status SqlDatabase::migrate(const SqlSchema& schema)
{
    if (m_engine == Engine::Sqlite)
        return bringUpToDate(schema);
    // Several coordinators may open one PostgreSQL database at once: the first creates or upgrades the
    // schema, the others wait for it (the lock lasts until the transaction ends) and then find it done.
    // Two-integer advisory keys never meet the single-integer ones of the identity triggers (PostgresDdl.h).
    return transaction([&]() -> Status {
        if (auto r = exec(QStringLiteral("SELECT pg_advisory_xact_lock(1196246341, 1)")); !r)
            return fail(r.error());
        return bringUpToDate(schema);
    });
}

Status SqlDatabase::bringUpToDate(const SqlSchema& schema)
{
    const QString findMeta =
        m_engine == Engine::Sqlite
            ? QStringLiteral("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'")
            : QStringLiteral(
                  "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
                  " AND table_name = 'meta'");
    auto existing = exec(findMeta);
    if (!existing)
        return fail(existing.error());
    if (!existing->next())
        return create(schema);
    auto version = exec(QStringLiteral("SELECT value FROM meta WHERE key='schema_version'"));
    if (!version || !version->next())
        return fail(QStringLiteral("%1: %2 has no schema version; %3").arg(m_name, m_what, schema.remedy));
    const int found = version->value(0).toInt();
    if (found == schema.version)
        return {};
    if (found < schema.version && !schema.upgrades.empty())
        return upgrade(schema, found);
    return fail(QStringLiteral("%1: %2 has schema version %3, not the %4 this version of Gleaner knows; %5")
                    .arg(m_name, m_what)
                    .arg(found)
                    .arg(schema.version)
                    .arg(schema.remedy));
}

Status SqlDatabase::create(const SqlSchema& schema)
{
    return transaction([&]() -> Status {
        if (auto s = execSchema("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"); !s)
            return s;
        for (const char* statement : schema.statements)
            if (auto s = execSchema(statement); !s)
                return s;
        auto r = exec(QStringLiteral("INSERT INTO meta (key, value) VALUES ('schema_version', ?)"),
                      {QString::number(schema.version)});
        return r ? Status() : fail(r.error());
    });
}

Status SqlDatabase::upgrade(const SqlSchema& schema, int from)
{
    return transaction([&]() -> Status {
        for (int version = from; version < schema.version; ++version) {
            const auto step = std::find_if(schema.upgrades.begin(), schema.upgrades.end(),
                                           [&](const SqlUpgrade& s) { return s.from == version; });
            if (step == schema.upgrades.end())
                return fail(
                    QStringLiteral("%1: %2 has schema version %3 and this version of Gleaner has no upgrade "
                                   "from version %4 to %5; %6")
                        .arg(m_name, m_what)
                        .arg(from)
                        .arg(version)
                        .arg(version + 1)
                        .arg(schema.remedy));
            for (const char* statement : step->statements)
                if (auto s = execSchema(statement); !s)
                    return fail(QStringLiteral("upgrading %1 from schema version %2 to %3: %4")
                                    .arg(m_what)
                                    .arg(version)
                                    .arg(version + 1)
                                    .arg(s.error()));
        }
        auto r = exec(QStringLiteral("UPDATE meta SET value = ? WHERE key = 'schema_version'"),
                      {QString::number(schema.version)});
        return r ? Status() : fail(r.error());
    });
}

} // namespace gleaner
