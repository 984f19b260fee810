//! Filter and project only: the input rows pass through, and the engine's
//! WHERE and SELECT list are all there is to the query.

use crate::Error;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, read_state, write_state};

#[derive(Debug, Default)]
pub struct Stateless;

impl Operator for Stateless {
    fn process(&mut self, _input: &BatchInput<'_>, _out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        Ok(())
    }

    fn passes_input_through(&self) -> bool {
        true
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_state(OperatorTag::Stateless, &(), out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        read_state::<()>(OperatorTag::Stateless, bytes)
    }
}
