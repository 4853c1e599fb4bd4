// The coordinator's signing-key rotation (config/SigningKeys): new manifests are signed with the new key,
// every lease reply names it, the chain lets a pinned agent follow it, work leased before still counts, and a
// stop at any step of the rotation leaves one key in force that the chain announces.

#include "CoordinatorFixture.h"
#include "TestSupport.h"
#include "crypto/KeyRotation.h"
#include "crypto/SignedEnvelope.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;

class TestSigningKeys : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void rotationSignsNewManifestsAndIsAnnounced();
    void workLeasedBeforeARotationStillCounts();
    void rotationInterruptedBeforeTheAnnouncementIsUndone();
    void rotationInterruptedAfterTheAnnouncementIsCompleted();
    void keyThatTheChainDoesNotAnnounceStopsTheStart();

private:
    QJsonObject leaseReply(const QString& agentId);
    QJsonObject rotate();
    VerifyKey firstKey() const { return *VerifyKey::fromPem(f.init.signingPublicKeyPem); }
    QList<KeyRotation> chainOnDisk() const;

    test::CoordinatorFixture f;
    QString m_dataset;
};

void TestSigningKeys::init()
{
    QVERIFY(f.setUp());
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
}

void TestSigningKeys::cleanup()
{
    f.core.reset();
}

QJsonObject TestSigningKeys::leaseReply(const QString& agentId)
{
    f.core->drain();
    return f.call([&] {
        return f.core->leases().lease(agentId, QJsonObject{{QStringLiteral("max_tasks"), 1}});
    });
}

QJsonObject TestSigningKeys::rotate()
{
    int status = 0;
    const QJsonObject reply = f.call([&] { return f.core->rotateSigningKey(); }, &status);
    if (status != 200)
        qWarning() << "rotation answered" << status << reply;
    return reply;
}

QList<KeyRotation> TestSigningKeys::chainOnDisk() const
{
    const QJsonObject file = QJsonDocument::fromJson(test::readFile(f.dir.signingKeyRotationsPath())).object();
    auto chain = KeyRotation::listFromJson(file.value(QStringLiteral("rotations")));
    return chain ? *chain : QList<KeyRotation>();
}

void TestSigningKeys::rotationSignsNewManifestsAndIsAnnounced()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 4)) > 0);
    const QString first = firstKey().fingerprint();
    QCOMPARE(leaseReply(agent).value(QStringLiteral("signing_key")).toString(), first);

    const QJsonObject rotated = rotate();
    const QString second = rotated.value(QStringLiteral("fingerprint")).toString();
    QCOMPARE(rotated.value(QStringLiteral("previous_fingerprint")).toString(), first);
    QVERIFY(!second.isEmpty() && second != first);

    // The next lease reply names the new key and its manifest verifies with it, not with the old one.
    const QJsonObject reply = leaseReply(agent);
    QCOMPARE(reply.value(QStringLiteral("signing_key")).toString(), second);
    const QJsonArray tasks = reply.value(QStringLiteral("tasks")).toArray();
    QCOMPARE(tasks.size(), 1);
    auto envelope = SignedEnvelope::fromJson(tasks.first().toObject());
    QVERIFY(envelope.ok());
    auto newKey = VerifyKey::fromPem(f.core->signingKeys().value(QStringLiteral("key")).toString().toLatin1());
    QVERIFY(newKey.ok());
    QCOMPARE(newKey->fingerprint(), second);
    QVERIFY(SignedEnvelope::verify(*newKey, *envelope).ok());
    QVERIFY(!SignedEnvelope::verify(firstKey(), *envelope).ok());

    // An agent that pinned the first key follows the published chain to the new one; so after a second rotation.
    const QString third = rotate().value(QStringLiteral("fingerprint")).toString();
    const QJsonObject published = f.core->signingKeys();
    QCOMPARE(published.value(QStringLiteral("fingerprint")).toString(), third);
    auto chain = KeyRotation::listFromJson(published.value(QStringLiteral("rotations")));
    QVERIFY(chain.ok());
    QCOMPARE(chain->size(), 2);
    auto path = KeyRotation::follow(firstKey(), *chain, third);
    QVERIFY2(path.ok(), qPrintable(path.error()));
    QCOMPARE(path->size(), 3);

    // On disk: the key in force, its public half and the chain, and nothing left of the rotation's steps.
    QCOMPARE(chainOnDisk().size(), 2);
    QVERIFY(!QFile::exists(f.dir.nextSigningKeyPath()));
    QCOMPARE(VerifyKey::fromPem(test::readFile(f.dir.signingPublicKeyPath()))->fingerprint(), third);
    QCOMPARE(QFile::permissions(f.dir.signingKeyPath()) & (QFile::ReadGroup | QFile::ReadOther), QFile::Permissions());

    // A restart keeps the key in force.
    QVERIFY(f.reopen());
    QCOMPARE(f.core->signingKeys().value(QStringLiteral("fingerprint")).toString(), third);
}

void TestSigningKeys::workLeasedBeforeARotationStillCounts()
{
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    QVERIFY(f.submit(test::tinyJobSpec(m_dataset, 4)) > 0);
    const auto before = f.lease(agent);
    QCOMPARE(before.size(), size_t(1));
    rotate();
    QString error;
    QCOMPARE(f.upload(agent, before[0].leaseId, f.leaseBase(before[0].leaseId), 0, &error), 202);
}

void TestSigningKeys::rotationInterruptedBeforeTheAnnouncementIsUndone()
{
    // A new key was written, then the coordinator stopped before the chain named it: no agent can know of it.
    const QString first = firstKey().fingerprint();
    f.core.reset();
    auto stray = SigningKey::generate();
    QVERIFY(stray.ok());
    QVERIFY(stray->saveToFile(f.dir.nextSigningKeyPath()).ok());
    QVERIFY(f.reopen());
    QCOMPARE(f.core->signingKeys().value(QStringLiteral("fingerprint")).toString(), first);
    QVERIFY(!QFile::exists(f.dir.nextSigningKeyPath()));
}

void TestSigningKeys::rotationInterruptedAfterTheAnnouncementIsCompleted()
{
    // The chain already announces the new key (agents may have followed it): the next start puts it in force.
    f.core.reset();
    auto current = SigningKey::loadFromFile(f.dir.signingKeyPath());
    auto next = SigningKey::generate();
    QVERIFY(current.ok() && next.ok());
    QVERIFY(next->saveToFile(f.dir.nextSigningKeyPath()).ok());
    const QJsonObject file{{QStringLiteral("rotations"),
                            KeyRotation::toJson({KeyRotation::announce(*current, next->publicKey(), 1)})}};
    QVERIFY(test::writeFile(f.dir.signingKeyRotationsPath(), QJsonDocument(file).toJson()));
    QVERIFY(f.reopen());
    QCOMPARE(f.core->signingKeys().value(QStringLiteral("fingerprint")).toString(), next->publicKey().fingerprint());
    QVERIFY(!QFile::exists(f.dir.nextSigningKeyPath()));
    // Stopped after the rename, before the public half was written: the next start writes it.
    f.core.reset();
    QVERIFY(test::writeFile(f.dir.signingPublicKeyPath(), current->publicKey().toPem()));
    QVERIFY(f.reopen());
    QCOMPARE(test::readFile(f.dir.signingPublicKeyPath()), next->publicKey().toPem());
    QCOMPARE(SigningKey::loadFromFile(f.dir.signingKeyPath())->publicKey(), next->publicKey());
    QCOMPARE(VerifyKey::fromPem(test::readFile(f.dir.signingPublicKeyPath()))->fingerprint(),
             next->publicKey().fingerprint());
}

void TestSigningKeys::keyThatTheChainDoesNotAnnounceStopsTheStart()
{
    // signing-key.pem restored from one backup, the chain from another: signing with a key no agent can follow
    // to would stop every agent, so the coordinator says so and does not start.
    f.core.reset();
    auto current = SigningKey::loadFromFile(f.dir.signingKeyPath());
    auto elsewhere = SigningKey::generate();
    QVERIFY(current.ok() && elsewhere.ok());
    const QJsonObject file{{QStringLiteral("rotations"),
                            KeyRotation::toJson({KeyRotation::announce(*current, elsewhere->publicKey(), 1)})}};
    QVERIFY(test::writeFile(f.dir.signingKeyRotationsPath(), QJsonDocument(file).toJson()));
    auto opened = coordinator::Coordinator::open(f.dir, f.config, f.clock);
    QVERIFY(!opened.ok());
    QVERIFY2(opened.error().contains(u"restore both files from the same backup"), qPrintable(opened.error()));
}

QTEST_GUILESS_MAIN(TestSigningKeys)
#include "TestSigningKeys.moc"
