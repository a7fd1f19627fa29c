//! The one conversion from the compiler's error enums to Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

create_exception!(
    _tiles,
    IrError,
    PyException,
    "An op could not be built: operand types or shapes do not fit."
);
create_exception!(
    _tiles,
    BackendError,
    PyException,
    "The pass pipeline or code generation failed."
);

/// Errors crossing the boundary.
#[derive(Debug, thiserror::Error)]
pub enum BoundaryError {
    /// Building IR failed.
    #[error(transparent)]
    Build(#[from] tile_ir::BuildError),
    /// Compiling failed.
    #[error(transparent)]
    Compile(#[from] nvptx_codegen::CompileError),
    /// A bad target name.
    #[error(transparent)]
    Codegen(#[from] nvptx_codegen::CodegenError),
    /// A name (dtype, op) the IR does not know.
    #[error("unknown {kind} `{name}`")]
    UnknownName {
        /// What kind of name.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// A handle that names no value of this builder.
    #[error("value handle {0} does not belong to this builder")]
    BadHandle(u32),
    /// Text that does not parse.
    #[error("parse error at {0}")]
    Parse(#[from] tile_ir::ParseError),
    /// The builder was already finished.
    #[error("this builder has already produced its kernel")]
    Finished,
}

impl From<BoundaryError> for PyErr {
    fn from(e: BoundaryError) -> PyErr {
        match e {
            BoundaryError::Compile(_) | BoundaryError::Codegen(_) => {
                BackendError::new_err(e.to_string())
            }
            _ => IrError::new_err(e.to_string()),
        }
    }
}
