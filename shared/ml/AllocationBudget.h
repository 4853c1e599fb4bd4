#pragma once
// A bound on the CPU memory libtorch may hold for tensors the current thread allocates while a check runs:
// the coordinator runs a submitted TorchScript program's forward() on a batch of two, and a program that asks
// for terabytes there (torch.zeros([1 << 40]), x.repeat(...)) must be refused with a message, not take the
// coordinator's memory. An allocation that would take the thread's live bytes past the limit throws
// libtorch's own error before anything is allocated, and exceeded() says so afterwards. Threads without a
// budget (training, evaluation, every other caller) allocate exactly as before. Budgets nest: the innermost
// one counts.

#include <QtGlobal>

#include <memory>

namespace gleaner::ml {

class AllocationBudget
{
public:
    explicit AllocationBudget(qint64 limitBytes);
    ~AllocationBudget();
    AllocationBudget(const AllocationBudget&) = delete;
    AllocationBudget& operator=(const AllocationBudget&) = delete;

    qint64 limit() const;
    // Whether an allocation was refused while this budget counted.
    bool exceeded() const;
    // Bytes allocated under this budget and not yet freed.
    qint64 live() const;

    struct State;

private:
    std::shared_ptr<State> m_state;
    std::shared_ptr<State> m_previous;
};

} // namespace gleaner::ml
