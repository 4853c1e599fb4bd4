// The tray app's rules without a socket or a window: how events change the status it shows, which icon a
// state gets, which changes interrupt the user, how numbers read, and which coordinator addresses it accepts.
#include "AgentStatus.h"
#include "FirstRunDialog.h"
#include "Formatting.h"
#include "Notices.h"
#include "TestSupport.h"

#include <QJsonArray>
#include <QLocale>
#include <QTest>

using namespace gleaner;
using namespace gleaner::gui;
using gleaner::test::jsonObject;

Q_DECLARE_METATYPE(gleaner::gui::TrayState)

class TestGuiRules : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { QLocale::setDefault(QLocale(QLocale::English, QLocale::UnitedStates)); }
    void eventsUpdateTheStatus_data();
    void eventsUpdateTheStatus();
    void aFinishedSubtaskLeavesTheListAndAsksForTotals();
    void progressOfAnUnknownSubtaskAddsIt();
    void trayStates_data();
    void trayStates();
    void pausedByUserOffersResume_data();
    void pausedByUserOffersResume();
    void noticesInterruptOncePerChange();
    void policyPausesAreToldOncePerCause();
    void durations_data();
    void durations();
    void hoursAndCounts();
    void coordinatorAddresses_data();
    void coordinatorAddresses();
};

void TestGuiRules::eventsUpdateTheStatus_data()
{
    QTest::addColumn<QByteArray>("before");
    QTest::addColumn<QByteArray>("event");
    QTest::addColumn<QByteArray>("after");
    QTest::addColumn<bool>("changed");

    QTest::newRow("state with code")
        << QByteArray(R"({"state":"training","reason":"idle","reason_code":"computing"})")
        << QByteArray(
               R"({"event":"state","state":"paused","reason":"paused on request","reason_code":"paused_by_user"})")
        << QByteArray(R"({"state":"paused","reason":"paused on request","reason_code":"paused_by_user"})")
        << true;
    QTest::newRow("state without code drops the old code")
        << QByteArray(R"({"state":"paused","reason":"x","reason_code":"snoozed"})")
        << QByteArray(R"({"event":"state","state":"waiting","reason":"no work"})")
        << QByteArray(R"({"state":"waiting","reason":"no work"})") << true;
    QTest::newRow("same state")
        << QByteArray(R"({"state":"waiting","reason":"no work","reason_code":"no_work"})")
        << QByteArray(R"({"event":"state","state":"waiting","reason":"no work","reason_code":"no_work"})")
        << QByteArray(R"({"state":"waiting","reason":"no work","reason_code":"no_work"})") << false;
    QTest::newRow("progress")
        << QByteArray(R"({"subtasks":[{"lease_id":"L-1","state":"training","step":1,"of":10}]})")
        << QByteArray(
               R"({"event":"progress","lease_id":"L-1","step":5,"of":10,"loss":0.5,"samples_per_s":100,"eta_seconds":9})")
        << QByteArray(
               R"({"subtasks":[{"lease_id":"L-1","state":"training","step":5,"of":10,"loss":0.5,"samples_per_s":100,"eta_seconds":9}]})")
        << true;
    QTest::newRow("a new subtask")
        << QByteArray(R"({"subtasks":[]})")
        << QByteArray(
               R"({"event":"subtask","lease_id":"L-2","state":"downloading","job":{"id":"j","name":"n"},"epoch":1,"shard":4})")
        << QByteArray(
               R"({"subtasks":[{"lease_id":"L-2","state":"downloading","job":{"id":"j","name":"n"},"epoch":1,"shard":4}]})")
        << true;
    QTest::newRow("coordinator unreachable")
        << QByteArray(R"({"coordinator":{"url":"https://c:1","reachable":true,"last_error":null}})")
        << QByteArray(R"({"event":"coordinator","reachable":false,"last_error":"connection refused"})")
        << QByteArray(
               R"({"coordinator":{"url":"https://c:1","reachable":false,"last_error":"connection refused"}})")
        << true;
    QTest::newRow("an unknown event")
        << QByteArray(R"({"state":"training"})") << QByteArray(R"({"event":"weather","state":"rain"})")
        << QByteArray(R"({"state":"training"})") << false;
}

void TestGuiRules::eventsUpdateTheStatus()
{
    QFETCH(QByteArray, before);
    QFETCH(QByteArray, event);
    QFETCH(QByteArray, after);
    QFETCH(bool, changed);
    QJsonObject status = jsonObject(before);
    QCOMPARE(applyEvent(status, jsonObject(event)), changed);
    QCOMPARE(status, jsonObject(after));
}

void TestGuiRules::aFinishedSubtaskLeavesTheListAndAsksForTotals()
{
    QJsonObject status = jsonObject(
        R"({"subtasks":[{"lease_id":"L-1","state":"uploading"},{"lease_id":"L-2","state":"training"}]})");
    bool refresh = false;
    QVERIFY(
        applyEvent(status, jsonObject(R"({"event":"subtask","lease_id":"L-1","state":"done"})"), &refresh));
    QVERIFY(refresh);
    QCOMPARE(status.value(u"subtasks").toArray().size(), 1);
    QCOMPARE(status.value(u"subtasks").toArray().at(0).toObject().value(u"lease_id").toString(),
             QStringLiteral("L-2"));

    refresh = false;
    QVERIFY(applyEvent(status,
                       jsonObject(R"({"event":"subtask","lease_id":"L-2","state":"failed","error":"x"})"),
                       &refresh));
    QVERIFY(refresh);
    QVERIFY(status.value(u"subtasks").toArray().isEmpty());
}

void TestGuiRules::progressOfAnUnknownSubtaskAddsIt()
{
    QJsonObject status;
    QVERIFY(applyEvent(status, jsonObject(R"({"event":"progress","lease_id":"L-9","step":3,"of":4})")));
    const QJsonObject subtask = status.value(u"subtasks").toArray().at(0).toObject();
    QCOMPARE(subtask.value(u"lease_id").toString(), QStringLiteral("L-9"));
    QCOMPARE(subtask.value(u"state").toString(), QStringLiteral("training"));
    QCOMPARE(subtask.value(u"step").toInt(), 3);
}

void TestGuiRules::trayStates_data()
{
    QTest::addColumn<QString>("state");
    QTest::addColumn<TrayState>("expected");
    QTest::addColumn<QString>("name");
    QTest::newRow("training") << "training" << TrayState::Training << "training";
    QTest::newRow("finishing still computes") << "finishing" << TrayState::Training << "training";
    QTest::newRow("waiting") << "waiting" << TrayState::Waiting << "waiting";
    QTest::newRow("paused") << "paused" << TrayState::Paused << "paused";
    QTest::newRow("error") << "error" << TrayState::Error << "error";
    QTest::newRow("offline") << "offline" << TrayState::Offline << "offline";
    QTest::newRow("stopped") << "stopped" << TrayState::Offline << "offline";
    QTest::newRow("a future state") << "hibernating" << TrayState::Waiting << "waiting";
}

void TestGuiRules::trayStates()
{
    QFETCH(QString, state);
    QFETCH(TrayState, expected);
    QFETCH(QString, name);
    QCOMPARE(trayStateFor(state), expected);
    QCOMPARE(trayStateName(expected), name);
}

void TestGuiRules::pausedByUserOffersResume_data()
{
    QTest::addColumn<QByteArray>("status");
    QTest::addColumn<bool>("resume");
    QTest::newRow("pause") << QByteArray(R"({"state":"paused","reason_code":"paused_by_user"})") << true;
    QTest::newRow("snooze") << QByteArray(R"({"state":"paused","reason_code":"snoozed"})") << true;
    QTest::newRow("an agent without codes") << QByteArray(R"({"state":"paused"})") << true;
    QTest::newRow("the user is active")
        << QByteArray(R"({"state":"waiting","reason_code":"user_active"})") << false;
    QTest::newRow("training") << QByteArray(R"({"state":"training","reason_code":"computing"})") << false;
}

void TestGuiRules::pausedByUserOffersResume()
{
    QFETCH(QByteArray, status);
    QFETCH(bool, resume);
    QCOMPARE(isPausedByUser(jsonObject(status)), resume);
}

void TestGuiRules::noticesInterruptOncePerChange()
{
    NoticeTracker notices;
    QVERIFY(!notices.update(QStringLiteral("offline"), QStringLiteral("connecting"),
                            QStringLiteral("Connecting")));
    QVERIFY(
        !notices.update(QStringLiteral("training"), QStringLiteral("computing"), QStringLiteral("Training")));

    auto error =
        notices.update(QStringLiteral("error"), QStringLiteral("error"), QStringLiteral("disk full"));
    QVERIFY(error);
    QCOMPARE(error->kind, Notice::Kind::Error);
    QCOMPARE(error->body, QStringLiteral("disk full"));
    QVERIFY(!notices.update(QStringLiteral("error"), QStringLiteral("error"), QStringLiteral("disk full")));
    // A new wording of the same error ("the last 4 subtasks failed", then 5) is not news.
    QVERIFY(
        !notices.update(QStringLiteral("error"), QStringLiteral("error"), QStringLiteral("disk still full")));
    // An error after the agent recovered is.
    QVERIFY(
        !notices.update(QStringLiteral("training"), QStringLiteral("computing"), QStringLiteral("Training")));
    QVERIFY(
        notices.update(QStringLiteral("error"), QStringLiteral("error"), QStringLiteral("token refused")));

    auto offline =
        notices.update(QStringLiteral("offline"), QStringLiteral("offline"), QStringLiteral("no route"));
    QVERIFY(offline);
    QCOMPARE(offline->kind, Notice::Kind::Offline);
    QVERIFY(!notices.update(QStringLiteral("offline"), QStringLiteral("offline"),
                            QStringLiteral("no route (2)")));

    auto finished = notices.update(QStringLiteral("stopped"), QString(), QStringLiteral("finished"));
    QVERIFY(finished);
    QCOMPARE(finished->kind, Notice::Kind::Finished);
    // The agent then goes away: that is the same news, not an offline one.
    QVERIFY(!notices.update(QStringLiteral("offline"), QStringLiteral("agent_finished"),
                            QStringLiteral("stopped")));
}

void TestGuiRules::policyPausesAreToldOncePerCause()
{
    NoticeTracker notices;
    QVERIFY(
        !notices.update(QStringLiteral("training"), QStringLiteral("computing"), QStringLiteral("Training")));
    auto battery =
        notices.update(QStringLiteral("waiting"), QStringLiteral("on_battery"), QStringLiteral("On battery"));
    QVERIFY(battery);
    QCOMPARE(battery->kind, Notice::Kind::PolicyPause);
    QVERIFY(battery->body.startsWith(QStringLiteral("On battery")));
    QVERIFY(
        !notices.update(QStringLiteral("training"), QStringLiteral("computing"), QStringLiteral("Training")));
    QVERIFY(!notices.update(QStringLiteral("waiting"), QStringLiteral("on_battery"),
                            QStringLiteral("On battery")));
    QVERIFY(notices.update(QStringLiteral("waiting"), QStringLiteral("program_running"),
                           QStringLiteral("steam runs")));
    // Waiting for work or for the user to go idle is not a pause by a rule.
    QVERIFY(!notices.update(QStringLiteral("waiting"), QStringLiteral("no_work"), QStringLiteral("no work")));
    QVERIFY(
        !notices.update(QStringLiteral("waiting"), QStringLiteral("idle_wait"), QStringLiteral("idle soon")));
}

void TestGuiRules::durations_data()
{
    QTest::addColumn<qint64>("seconds");
    QTest::addColumn<QString>("text");
    QTest::newRow("negative") << qint64(-1) << "";
    QTest::newRow("zero") << qint64(0) << "0 s";
    QTest::newRow("seconds") << qint64(42) << "42 s";
    QTest::newRow("whole minutes") << qint64(120) << "2 min";
    QTest::newRow("minutes") << qint64(250) << "4 min 10 s";
    QTest::newRow("hours") << qint64(7500) << "2 h 5 min";
    QTest::newRow("whole hours") << qint64(7200) << "2 h";
    QTest::newRow("days") << qint64(3 * 86400 + 4 * 3600 + 59) << "3 d 4 h";
}

void TestGuiRules::durations()
{
    QFETCH(qint64, seconds);
    QFETCH(QString, text);
    QCOMPARE(formatDuration(seconds), text);
}

void TestGuiRules::hoursAndCounts()
{
    QCOMPARE(formatHours(18720), QStringLiteral("5.2 hours"));
    QCOMPARE(formatHours(3600), QStringLiteral("1 hour"));
    QCOMPARE(formatHours(0), QStringLiteral("0.0 hours"));
    QCOMPARE(formatHours(3600 * 312 + 100), QStringLiteral("312 hours"));
    QCOMPARE(formatCount(1234000), QStringLiteral("1,234,000"));
}

void TestGuiRules::coordinatorAddresses_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("url");   // empty: refused
    QTest::addColumn<QString>("error"); // a part of the message
    QTest::newRow("host and port") << "https://coord.example:8443"
                                   << "https://coord.example:8443"
                                   << "";
    QTest::newRow("trailing slash and spaces") << "  https://coord.example:8443/ "
                                               << "https://coord.example:8443"
                                               << "";
    QTest::newRow("no port") << "https://coord.example"
                             << "https://coord.example"
                             << "";
    QTest::newRow("an IP address") << "https://10.0.0.2:8443"
                                   << "https://10.0.0.2:8443"
                                   << "";
    QTest::newRow("IPv6") << "https://[::1]:8443"
                          << "https://[::1]:8443"
                          << "";
    QTest::newRow("empty") << ""
                           << ""
                           << "Enter the coordinator's address";
    QTest::newRow("no scheme") << "coord.example:8443"
                               << ""
                               << "does not start with https://";
    QTest::newRow("http") << "http://coord.example:8443"
                          << ""
                          << "only speaks HTTPS";
    QTest::newRow("a path") << "https://coord.example:8443/api/v1"
                            << ""
                            << "more than a host and a port";
    QTest::newRow("user info") << "https://me@coord.example:8443"
                               << ""
                               << "more than a host and a port";
    QTest::newRow("no host") << "https://:8443"
                             << ""
                             << "is not a coordinator address";
    QTest::newRow("a bad port") << "https://coord.example:99999"
                                << ""
                                << "is not a coordinator address";
    QTest::newRow("spaces inside") << "https://coord example:8443"
                                   << ""
                                   << "is not a coordinator address";
}

void TestGuiRules::coordinatorAddresses()
{
    QFETCH(QString, text);
    QFETCH(QString, url);
    QFETCH(QString, error);
    const auto parsed = FirstRunDialog::parseCoordinatorUrl(text);
    if (url.isEmpty()) {
        QVERIFY2(!parsed.ok(), qPrintable(text));
        QVERIFY2(parsed.error().contains(error), qPrintable(parsed.error()));
        QVERIFY2(parsed.error().contains(QStringLiteral("https://HOST:PORT")), qPrintable(parsed.error()));
    } else {
        QVERIFY2(parsed.ok(), qPrintable(parsed.error()));
        QCOMPARE(parsed->toString(), url);
    }
}

QTEST_MAIN(TestGuiRules)
#include "TestGuiRules.moc"
