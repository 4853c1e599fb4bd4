// `gleaner-coordinator init` (config/Initializer): the gleaner-coordinator package makes
// /var/lib/gleaner-coordinator empty and owned by the service user, who then runs init into it. An empty folder is
// taken and kept, a non-empty one refused untouched, and a failed init leaves the folder as it found it, so the
// admin can run init again (the service user cannot create a new folder in /var/lib).

#include "TestSupport.h"
#include "config/Initializer.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestInitializer : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void takesAnEmptyFolderThatExists();
    void refusesAFolderThatHoldsSomething();
    void failureKeepsAFolderThatExistedAsItWas();
    void failureRemovesAFolderItMade();
    void failureRemovesASharedFolderItMade();

private:
    static QStringList entries(const QString& path)
    {
        return QDir(path).entryList(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot,
                                    QDir::Name);
    }

    std::unique_ptr<QTemporaryDir> m_scratch;
};

void TestInitializer::init()
{
    m_scratch = test::scratchDir();
}

void TestInitializer::takesAnEmptyFolderThatExists()
{
    const QString root = m_scratch->filePath(QStringLiteral("gleaner-coordinator"));
    QVERIFY(QDir().mkpath(root));
    QVERIFY(QFile::setPermissions(root, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner |
                                            QFileDevice::ReadGroup | QFileDevice::ExeGroup |
                                            QFileDevice::ReadOther | QFileDevice::ExeOther));

    const DataDirectory dir(root);
    auto created = initializeDataDirectory(dir, CoordinatorConfig());
    QVERIFY2(created, created ? "" : qPrintable(created.error()));
    QVERIFY(dir.exists());
    QVERIFY(dir.loadConfig());
    QVERIFY(QFile::exists(dir.certificatePath()));
    QVERIFY(QFile::exists(dir.adminTokenPath()));
    QCOMPARE(test::fileMode(root), mode_t(0700)); // the keys inside are nobody else's business
}

void TestInitializer::refusesAFolderThatHoldsSomething()
{
    const QString root = m_scratch->filePath(QStringLiteral("busy"));
    QVERIFY(QDir().mkpath(root));
    QVERIFY(test::writeFile(root + QStringLiteral("/notes.txt"), "an admin's file"));

    auto created = initializeDataDirectory(DataDirectory(root), CoordinatorConfig());
    QVERIFY(!created);
    QVERIFY2(created.error().contains(QStringLiteral("not empty")), qPrintable(created.error()));
    QVERIFY2(created.error().contains(root), qPrintable(created.error()));
    QCOMPARE(entries(root), QStringList{QStringLiteral("notes.txt")});
    QCOMPARE(test::readFile(root + QStringLiteral("/notes.txt")), QByteArray("an admin's file"));
}

void TestInitializer::failureKeepsAFolderThatExistedAsItWas()
{
    // A hidden file does not make a folder non-empty for init, and is not init's to remove.
    const QString root = m_scratch->filePath(QStringLiteral("gleaner-coordinator"));
    QVERIFY(QDir().mkpath(root));
    QVERIFY(test::writeFile(root + QStringLiteral("/.placed-by-admin"), "x"));

    // The signing key is written before the certificate is read: a missing certificate fails half-way.
    const QString missing = m_scratch->filePath(QStringLiteral("no-such-cert.pem"));
    auto created = initializeDataDirectory(DataDirectory(root), CoordinatorConfig(), missing,
                                           m_scratch->filePath(QStringLiteral("no-such-key.pem")));
    QVERIFY(!created);
    QVERIFY(QFileInfo(root).isDir());
    QCOMPARE(entries(root), QStringList{QStringLiteral(".placed-by-admin")});

    // And init works there afterwards.
    auto again = initializeDataDirectory(DataDirectory(root), CoordinatorConfig());
    QVERIFY2(again, again ? "" : qPrintable(again.error()));
    QVERIFY(DataDirectory(root).exists());
}

void TestInitializer::failureRemovesAFolderItMade()
{
    const QString root = m_scratch->filePath(QStringLiteral("new/data"));
    auto created = initializeDataDirectory(DataDirectory(root), CoordinatorConfig(),
                                           m_scratch->filePath(QStringLiteral("no-such-cert.pem")),
                                           m_scratch->filePath(QStringLiteral("no-such-key.pem")));
    QVERIFY(!created);
    QVERIFY(!QFileInfo::exists(root));
}

void TestInitializer::failureRemovesASharedFolderItMade()
{
    // The shared folder is made before the database is opened: an unreachable database fails after it.
    CoordinatorConfig config;
    config.database = QStringLiteral("postgresql://gleaner@127.0.0.1:1/nowhere");
    config.redis = QStringLiteral("redis://127.0.0.1:1/0");
    config.sharedDir = m_scratch->filePath(QStringLiteral("shared"));
    auto created =
        initializeDataDirectory(DataDirectory(m_scratch->filePath(QStringLiteral("data"))), config);
    QVERIFY(!created);
    QVERIFY2(!QFileInfo::exists(config.sharedDir), "a failed init left the shared folder it made");
    QVERIFY(!QFileInfo::exists(m_scratch->filePath(QStringLiteral("data"))));
    // One that was there, empty, stays for the next try.
    QVERIFY(QDir().mkpath(config.sharedDir));
    created = initializeDataDirectory(DataDirectory(m_scratch->filePath(QStringLiteral("data"))), config);
    QVERIFY(!created);
    QVERIFY(QFileInfo(config.sharedDir).isDir());
}

QTEST_GUILESS_MAIN(TestInitializer)
#include "TestInitializer.moc"
