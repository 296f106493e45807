//! Dependencies between jobs: a job enqueued to run after others have ended.

use crate::context::JobId;

/// What a dependent job does when a prerequisite ends `dead` or `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnFailure {
    /// The dependent is cancelled at once, with a reason naming the prerequisite (the default).
    /// Replaying the prerequisite from the dead letters re-opens it.
    #[default]
    Cancel,
    /// The dependent runs all the same once every prerequisite has ended.
    Run,
}

impl OnFailure {
    /// The name stored in the database: `cancel` or `run`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Cancel => "cancel",
            OnFailure::Run => "run",
        }
    }
}

/// One prerequisite of a job: the job to wait for, and what to do if it fails.
///
/// Made from what an enqueue returned (`Enqueued`), or from an id read back from the database
/// with [`Dependency::on_job`]:
///
/// ```ignore
/// let charge = charge_card::enqueue_in(&mut tx, order_id).await?;
/// send_receipt::builder(order_id).after([charge]).enqueue_in(&mut tx).await?;
/// update_ledger::builder(order_id)
///     .after([Dependency::on(charge).run_on_failure()])
///     .enqueue_in(&mut tx)
///     .await?;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dependency {
    /// The prerequisite's id.
    pub job: JobId,
    /// What the dependent does if the prerequisite ends dead or cancelled.
    pub on_failure: OnFailure,
}

impl Dependency {
    /// A dependency on `prerequisite` (what an enqueue returned), cancelling the dependent if
    /// it fails.
    pub fn on(prerequisite: impl IntoDependency) -> Self {
        prerequisite.into_dependency()
    }

    /// A dependency on the job of id `id`, read back from the database, cancelling the
    /// dependent if it fails. The job must exist when the dependent is enqueued.
    pub fn on_job(id: JobId) -> Self {
        Self {
            job: id,
            on_failure: OnFailure::Cancel,
        }
    }

    /// The dependent runs even if this prerequisite ends dead or cancelled.
    pub fn run_on_failure(mut self) -> Self {
        self.on_failure = OnFailure::Run;
        self
    }
}

/// A job that another job can be enqueued to run after: what an enqueue returned
/// (`Enqueued`), or a [`Dependency`].
///
/// Plain integers are not accepted, so that an order id cannot be passed where a job id is
/// meant; wrap an id read from the database with [`Dependency::on_job`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a job to depend on",
    label = "not a job: pass what an enqueue returned",
    note = "a dependency is what `enqueue_in`/`enqueue` returned (`Enqueued`), or `jobs::Dependency::on_job(id)` for a job id read from the database"
)]
pub trait IntoDependency {
    /// The dependency, cancelling the dependent on failure unless it says otherwise.
    fn into_dependency(self) -> Dependency;
}

impl IntoDependency for Dependency {
    fn into_dependency(self) -> Dependency {
        self
    }
}

/// The jobs another job runs after: an array, a vector or a slice of dependencies (what
/// enqueues returned, or [`Dependency`] values).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a list of jobs to depend on",
    label = "not a list of jobs",
    note = "pass an array, `Vec` or slice of what `enqueue_in`/`enqueue` returned (`Enqueued`), or of `jobs::Dependency::on_job(id)` for job ids read from the database"
)]
pub trait Prerequisites {
    /// The dependencies, in order.
    fn into_dependencies(self) -> Vec<Dependency>;
}

impl<D: IntoDependency, const N: usize> Prerequisites for [D; N] {
    fn into_dependencies(self) -> Vec<Dependency> {
        self.into_iter()
            .map(IntoDependency::into_dependency)
            .collect()
    }
}

impl<D: IntoDependency> Prerequisites for Vec<D> {
    fn into_dependencies(self) -> Vec<Dependency> {
        self.into_iter()
            .map(IntoDependency::into_dependency)
            .collect()
    }
}

impl<D: IntoDependency + Copy> Prerequisites for &[D] {
    fn into_dependencies(self) -> Vec<Dependency> {
        self.iter()
            .map(|dependency| dependency.into_dependency())
            .collect()
    }
}

impl<D: IntoDependency + Copy, const N: usize> Prerequisites for &[D; N] {
    fn into_dependencies(self) -> Vec<Dependency> {
        self.as_slice().into_dependencies()
    }
}

impl<D: IntoDependency + Copy> Prerequisites for &Vec<D> {
    fn into_dependencies(self) -> Vec<Dependency> {
        self.as_slice().into_dependencies()
    }
}

/// Merges repeated prerequisites: one dependency per job, in the order first named; a job
/// named with both behaviours cancels the dependent on failure.
pub fn merge_dependencies(dependencies: &mut Vec<Dependency>) {
    let mut merged: Vec<Dependency> = Vec::with_capacity(dependencies.len());
    for dependency in dependencies.drain(..) {
        match merged.iter_mut().find(|seen| seen.job == dependency.job) {
            Some(seen) => {
                if dependency.on_failure == OnFailure::Cancel {
                    seen.on_failure = OnFailure::Cancel;
                }
            }
            None => merged.push(dependency),
        }
    }
    *dependencies = merged;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_prerequisites_merge_and_cancel_wins() {
        let mut dependencies = vec![
            Dependency::on_job(3).run_on_failure(),
            Dependency::on_job(1),
            Dependency::on_job(3),
            Dependency::on_job(1).run_on_failure(),
        ];
        merge_dependencies(&mut dependencies);
        assert_eq!(
            dependencies,
            [Dependency::on_job(3), Dependency::on_job(1)],
            "one per job, first order kept, cancel wins"
        );
    }
}
