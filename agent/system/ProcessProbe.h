#pragma once
// Which of the owner's "pause programs" (a game, a video editor) are running, so the agent steps back while
// they are. Names are given as a person writes them ("steam", "obs", "RobloxPlayerBeta.exe"); the probe
// answers with the entries of that list, spelled as given, so the status can quote the preference back.
//
// ProcProcessProbe reads Linux's /proc; Windows (Toolhelp32 snapshot) and macOS (proc_listallpids) sources
// would be one file each behind this interface.

#include <QStringList>

namespace gleaner::agent {

class ProcessProbe
{
public:
    virtual ~ProcessProbe();
    // The entries of `names` (as given, in their order, each at most once) that match a running program.
    virtual QStringList running(const QStringList& names) = 0;
};

// Answers from a list of program names set by the test, matched as ProcProcessProbe matches
// (case-insensitively).
class FakeProcessProbe final : public ProcessProbe
{
public:
    QStringList runningPrograms;
    QStringList running(const QStringList& names) override;
};

} // namespace gleaner::agent
