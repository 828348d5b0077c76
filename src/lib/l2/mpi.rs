//! MPI as the transport of a collective push ([`Comm`]), through the `mpi`
//! crate (rsmpi) over the system's MPI (cargo feature `mpi`).
//!
//! Variable-size exchanges are two collectives each: the sizes, then the
//! bytes (`MPI_Allgatherv`, `MPI_Alltoallv`). The table of shared hashes is
//! reduced with a user-defined operator over a contiguous datatype of the
//! whole encoded table, so that MPI hands the operator whole tables (it may
//! split a buffer into pieces of whole elements, never an element), then
//! broadcast from rank 0.

use std::ffi::{c_int, c_void};

use mpi::collective::UnsafeUserOperation;
use mpi::datatype::{MutView, PartitionMut, UserDatatype, View};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::{Count, ffi};

use crate::error::{Error, Result};
use crate::l2::collective::{Comm, HashTable};

/// A communicator of the job: the world of `mpirun`, or one a program
/// hands to librex.
pub struct MpiComm {
    comm: SimpleCommunicator,
    // Finalizes MPI when the CLI's communicator goes (None: the program
    // initialized MPI and finalizes it).
    _universe: Option<mpi::environment::Universe>,
}

// SAFETY: an MPI communicator handle is a plain value naming an object MPI
// owns; nothing in `MpiComm` is tied to the thread that made it. Which
// threads may call MPI is MPI's rule (the thread level the program asked
// `MPI_Init_thread` for): librex uses its communicator only under its lock,
// from the threads that call `rex_*`, and rex(3) says an MPI program calls
// them as it calls MPI (from the main thread, with MPI_THREAD_FUNNELED).
unsafe impl Send for MpiComm {}

impl std::fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MpiComm(rank {} of {})",
            self.comm.rank(),
            self.comm.size()
        )
    }
}

impl MpiComm {
    /// Initializes MPI (the process is a rank started by `mpirun`) and
    /// returns its world; MPI is finalized when the value is dropped.
    pub fn init() -> Result<MpiComm> {
        let u = mpi::initialize().ok_or_else(|| {
            Error::Invalid("MPI is initialized already, or cannot be initialized".into())
        })?;
        Ok(MpiComm {
            comm: u.world(),
            _universe: Some(u),
        })
    }

    /// A duplicate of the communicator whose Fortran handle is `fcomm`
    /// (`MPI_Comm_c2f(comm)` in C: the one handle type every MPI agrees
    /// on), in a program that initialized MPI itself.
    pub fn from_fortran(fcomm: c_int) -> Result<MpiComm> {
        if !mpi::environment::is_initialized() {
            return Err(Error::Invalid(
                "MPI is not initialized: call MPI_Init before rex_init_comm".into(),
            ));
        }
        // SAFETY: MPI is initialized (checked above). MPI_Comm_f2c converts
        // any integer without touching memory (an invalid handle yields
        // MPI_COMM_NULL or an invalid handle, which MPI_Comm_dup reports
        // through its return code, checked below). The duplicate is a new
        // communicator this value owns; `from_raw` takes it over and frees
        // it on drop.
        unsafe {
            let c = ffi::MPI_Comm_f2c(fcomm);
            let mut dup = std::mem::zeroed::<ffi::MPI_Comm>();
            if ffi::MPI_Comm_dup(c, &mut dup) != 0 {
                return Err(Error::Invalid(format!(
                    "MPI communicator handle {fcomm} cannot be duplicated"
                )));
            }
            Ok(MpiComm {
                comm: SimpleCommunicator::from_raw(dup),
                _universe: None,
            })
        }
    }

    /// Whether MPI has been initialized in this process (librex's test for
    /// "running in an MPI job").
    pub fn initialized() -> bool {
        mpi::environment::is_initialized() && !mpi::environment::is_finalized()
    }

    /// A duplicate of `MPI_COMM_WORLD`, in a program that initialized MPI.
    pub fn world_of_program() -> Result<MpiComm> {
        // SAFETY: MPI_Comm_c2f of the predefined world communicator is a
        // pure conversion.
        let f = unsafe { ffi::MPI_Comm_c2f(ffi::RSMPI_COMM_WORLD) };
        Self::from_fortran(f)
    }
}

fn counts_displs(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |acc, &x| {
            let at = *acc;
            *acc += x;
            Some(at)
        })
        .collect()
}

fn split(buf: &[u8], counts: &[Count]) -> Vec<Vec<u8>> {
    let mut at = 0usize;
    counts
        .iter()
        .map(|&c| {
            let v = buf[at..at + c as usize].to_vec();
            at += c as usize;
            v
        })
        .collect()
}

fn count_of(n: usize) -> Count {
    Count::try_from(n).expect("an MPI message under 2 GiB")
}

/// The merge operator over whole encoded tables.
///
/// # Safety
/// MPI calls it with `len` elements of the contiguous table datatype at
/// `invec` and `inoutvec`; `dt` is that datatype.
unsafe extern "C" fn merge_op(
    invec: *mut c_void,
    inoutvec: *mut c_void,
    len: *mut c_int,
    dt: *mut ffi::MPI_Datatype,
) {
    // SAFETY: the arguments are MPI's, as documented above: `len` and `dt`
    // point at valid values; each element is `size` bytes, so the slices
    // cover exactly the `len` elements MPI handed over and do not overlap
    // (MPI's in and inout buffers are distinct).
    let r = std::panic::catch_unwind(|| unsafe {
        let mut size: c_int = 0;
        ffi::MPI_Type_size(*dt, &mut size);
        let (n, size) = (*len as usize, size as usize);
        let a = std::slice::from_raw_parts(invec as *const u8, n * size);
        let b = std::slice::from_raw_parts_mut(inoutvec as *mut u8, n * size);
        for (x, y) in a.chunks_exact(size).zip(b.chunks_exact_mut(size)) {
            match (HashTable::decode(x), HashTable::decode(y)) {
                (Some(tx), Some(ty)) => tx.merge(&ty).encode_into(y),
                _ => std::process::abort(),
            }
        }
    });
    if r.is_err() {
        // Unwinding out of an extern "C" function is not allowed.
        std::process::abort();
    }
}

impl Comm for MpiComm {
    fn rank(&self) -> u32 {
        self.comm.rank() as u32
    }

    fn size(&self) -> u32 {
        self.comm.size() as u32
    }

    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let n = self.comm.size() as usize;
        let mut counts: Vec<Count> = vec![0; n];
        self.comm
            .all_gather_into(&count_of(mine.len()), &mut counts[..]);
        let displs = counts_displs(&counts);
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        // Never two empty slices (both the same dangling pointer, which
        // MPI refuses as aliased buffers): one spare byte each.
        let mut buf = vec![0u8; total + 1];
        let send: Vec<u8> = mine.iter().copied().chain([0]).collect();
        {
            let mut p = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            self.comm
                .all_gather_varcount_into(&send[..mine.len()], &mut p);
        }
        split(&buf, &counts)
    }

    fn all_to_all(&self, send: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let scounts: Vec<Count> = send.iter().map(|s| count_of(s.len())).collect();
        let mut rcounts: Vec<Count> = vec![0; scounts.len()];
        self.comm.all_to_all_into(&scounts[..], &mut rcounts[..]);
        let sdispls = counts_displs(&scounts);
        let rdispls = counts_displs(&rcounts);
        // One spare byte each: two empty buffers would share the dangling
        // pointer of an empty Vec, which MPI refuses as aliased.
        let mut flat: Vec<u8> = send.concat();
        flat.push(0);
        let mut buf = vec![0u8; rcounts.iter().map(|&c| c as usize).sum::<usize>() + 1];
        {
            let s = mpi::datatype::Partition::new(&flat[..], &scounts[..], &sdispls[..]);
            let mut r = PartitionMut::new(&mut buf[..], &rcounts[..], &rdispls[..]);
            self.comm.all_to_all_varcount_into(&s, &mut r);
        }
        split(&buf, &rcounts)
    }

    fn merge_all(&self, table: &HashTable) -> HashTable {
        let len = HashTable::encoded_len(table.cap);
        let send = table.encode();
        let mut recv = vec![0u8; len];
        let dt = UserDatatype::contiguous(count_of(len), &u8::equivalent_datatype());
        // SAFETY: `merge_op` is safe for reductions over this datatype (see
        // its doc); the views cover exactly one element of `len` bytes of
        // buffers of `len` bytes.
        unsafe {
            let op = UnsafeUserOperation::commutative(merge_op);
            let sv = View::with_count_and_datatype(&send[..], 1, &dt);
            let root = self.comm.process_at_rank(0);
            if self.comm.rank() == 0 {
                let mut rv = MutView::with_count_and_datatype(&mut recv[..], 1, &dt);
                root.reduce_into_root(&sv, &mut rv, &op);
            } else {
                root.reduce_into(&sv, &op);
            }
            let mut bv = MutView::with_count_and_datatype(&mut recv[..], 1, &dt);
            root.broadcast_into(&mut bv);
        }
        HashTable::decode(&recv).expect("rank 0's merged table decodes")
    }
}
